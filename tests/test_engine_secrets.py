"""A key a server echoes back is stored nowhere: no text column of any table holds it."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from promptlab.cli import main
from promptlab.engine import Engine, parse_spec
from promptlab.engine.testing import ScriptedProvider
from promptlab.errors import ErrorKind, ProviderError
from promptlab.providers.config import EndpointConfig
from promptlab.store import Store

KEY = "sk-live-0123456789abcdefSECRET"


def tables_holding(store: Store, needle: str) -> list[str]:
    """Every `table.column` of text type in which some value contains `needle`."""
    hits = []
    with store.read() as cur:
        columns = cur.execute(
            "SELECT table_name, column_name FROM information_schema.columns "
            "WHERE data_type = 'VARCHAR' AND table_schema = 'main'"
        ).fetchall()
        for table, column in columns:
            (count,) = cur.execute(
                f'SELECT count(*) FROM "{table}" WHERE contains("{column}", ?)', [needle]
            ).fetchone() or (0,)
            if count:
                hits.append(f"{table}.{column}")
    return hits


def test_an_echoed_key_reaches_no_table_and_no_cli_output(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ECHO_PROVIDER_KEY", KEY)
    dataset = tmp_path / "d.csv"
    dataset.write_text("text\n" + "".join(f"row {i}\n" for i in range(6)))

    def echo(_request: object, _n: int) -> ProviderError:
        # 401 stops the run (status_reason, run_events); 400 fails the item (results).
        return ProviderError(ErrorKind.BAD_REQUEST, f"bad header Authorization: Bearer {KEY}")

    provider = ScriptedProvider(fault=echo)
    provider.script.append(ProviderError(ErrorKind.SERVER, f"upstream got key {KEY}", status=500))
    endpoint = EndpointConfig(name="echo", kind="openai", api_key_env="ECHO_PROVIDER_KEY")
    spec = parse_spec(
        {
            "dataset": str(dataset),
            "variants": [{"messages": [{"role": "user", "content": "{{ text }}"}],
                          "model": "echo:m"}],
            "retry": {"backoff_base_s": 0.01, "backoff_cap_s": 0.02},
        }
    )  # fmt: skip
    with Engine(store, endpoints={"echo": endpoint}, provider_factory=lambda _c: provider) as eng:
        first = eng.submit(spec)
        assert eng.wait(first, timeout=30).status == "completed"
        provider.fault = lambda _r, _n: ProviderError(
            ErrorKind.AUTH, f"invalid key {KEY}", status=401
        )
        second = eng.submit(spec)
        stopped = eng.wait(second, timeout=30)
    assert stopped.status == "failed" and "[redacted]" in (stopped.reason or "")
    assert tables_holding(store, "0123456789abcdef") == []
    assert tables_holding(store, "[redacted]")  # the messages are there, masked

    store.close()
    status = CliRunner().invoke(main, ["--db", str(store.path), "status", second])
    assert status.exit_code == 0 and "invalid key" in status.output
    assert "0123456789abcdef" not in status.output
