"""A key a server echoes back is stored nowhere: no text column of any table holds it."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner, Result

from promptlab.cli import main
from promptlab.engine import Engine, parse_spec
from promptlab.engine.testing import ScriptedProvider
from promptlab.errors import ErrorKind, ProviderError
from promptlab.fakellm.server import FakeLLMConfig, serve_in_thread
from promptlab.providers.config import EndpointConfig
from promptlab.store import Store

KEY = "sk-live-0123456789abcdefSECRET"


def tables_holding(store: Store, needle: str) -> list[str]:
    """Every `table.column` of text type in which some value contains `needle`."""
    hits = []
    with store.read() as cur:
        columns = cur.execute(
            "SELECT table_name, column_name FROM information_schema.columns "
            "WHERE data_type IN ('VARCHAR', 'JSON') AND table_schema = 'main'"
        ).fetchall()
        for table, column in columns:
            (count,) = cur.execute(
                f'SELECT count(*) FROM "{table}" WHERE contains(CAST("{column}" AS VARCHAR), ?)',
                [needle],
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
            "variants": [
                {"messages": [{"role": "user", "content": "{{ text }}"}], "model": "echo:m"}
            ],
            "retry": {"backoff_base_s": 0.01, "backoff_cap_s": 0.02},
        }
    )
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


def write_providers(tmp_path: Path, kind: str, base_url: str) -> Path:
    """A providers file: the only place an endpoint that sends a key can come from."""
    path = tmp_path / "providers.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "endpoints": {
                    "remote": {
                        "kind": kind,
                        "base_url": base_url,
                        "api_key_env": "REMOTE_LLM_KEY",
                        "models": {"*": {"context_window": 8192}},
                    }
                }
            }
        )
    )
    return path


def run_with_echoed_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Result:
    """`promptlab run` of three rows against a server that echoes the Authorization
    header (the configured key) back in every error it returns."""
    with serve_in_thread(FakeLLMConfig(port=0, echo_auth_rate=1.0, latency_ms=1)) as server:
        providers = write_providers(tmp_path, "openai", server.openai_base_url)
        monkeypatch.setenv("PROMPTLAB_PROVIDERS", str(providers))
        monkeypatch.setenv("REMOTE_LLM_KEY", KEY)
        (tmp_path / "rows.csv").write_text("text\nfirst\nsecond\nthird\n")
        spec = tmp_path / "spec.yaml"
        spec.write_text(
            "dataset: rows.csv\nvariants: [{messages: [{role: user, content: '{{ text }}'}],"
            " model: 'remote:gpt-4o-mini'}]\n"
        )
        run = CliRunner().invoke(main, ["run", str(spec)])
        assert server.stats()["attempts"] == 3  # the key was sent, and echoed back
    assert run.exit_code == 0, run.output
    return run


def test_a_server_echoing_the_authorization_header_leaves_no_key_anywhere(
    tmp_path: Path, db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = run_with_echoed_key(tmp_path, monkeypatch)
    run_id = run.stdout.split()[1]
    status = CliRunner().invoke(main, ["status", run_id])
    assert "invalid request from Bearer [redacted]" in status.output
    for output in (run.output, status.output):
        assert "0123456789abcdef" not in output
    with Store(db_path) as store:
        assert tables_holding(store, "0123456789abcdef") == []


def test_an_anthropic_run_sends_temperature_and_top_p(
    tmp_path: Path, db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with serve_in_thread(FakeLLMConfig(port=0, latency_ms=1)) as server:
        providers = write_providers(tmp_path, "anthropic", server.anthropic_base_url)
        monkeypatch.setenv("PROMPTLAB_PROVIDERS", str(providers))
        monkeypatch.setenv("REMOTE_LLM_KEY", KEY)
        (tmp_path / "rows.csv").write_text("text\nfirst\nsecond\n")
        spec = tmp_path / "spec.yaml"
        spec.write_text(
            "dataset: rows.csv\nvariants: [{messages: [{role: system, content: Be brief.},"
            " {role: user, content: '{{ text }}'}], model: 'remote:claude-3-5-haiku-latest',"
            " params: {temperature: 0.3, top_p: 0.9, max_tokens: 64}}]\n"
        )
        run = CliRunner().invoke(main, ["run", str(spec)])
        received = server.requests()
    assert run.exit_code == 0, run.output
    assert "succeeded 2, failed 0" in run.output
    bodies = [r["body"] for r in received]
    assert len(bodies) == 2
    assert all(b["temperature"] == 0.3 and b["top_p"] == 0.9 for b in bodies)
    assert all(b["max_tokens"] == 64 and b["system"] == "Be brief." for b in bodies)


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
@pytest.mark.parametrize("path", ["live", "batch"])
def test_each_provider_error_path_leaves_the_key_nowhere(
    kind: str,
    path: str,
    tmp_path: Path,
    db_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A server that echoes the caller's key in every error it can (a live call's error
    body; a batch refused with the key in `errors.data[].message` for OpenAI, a 400 at
    create for Anthropic): no table, log line, `status` output or run view holds it."""
    config = FakeLLMConfig(port=0, api_key=KEY, echo_auth_rate=1.0, batch_echo_auth=True)
    with serve_in_thread(config) as server:
        base = server.openai_base_url if kind == "openai" else server.anthropic_base_url
        providers = write_providers(tmp_path, kind, base)
        if path == "batch":
            entry = yaml.safe_load(providers.read_text())
            entry["endpoints"]["remote"]["batch"] = {"poll_s": 0.02, "linger_s": 0.02}
            providers.write_text(yaml.safe_dump(entry))
        monkeypatch.setenv("PROMPTLAB_PROVIDERS", str(providers))
        monkeypatch.setenv("REMOTE_LLM_KEY", KEY)
        (tmp_path / "rows.csv").write_text("text\nfirst\nsecond\nthird\n")
        executor = "executor: provider-batch\n" if path == "batch" else ""
        spec = tmp_path / "spec.yaml"
        spec.write_text(
            f"{executor}dataset: rows.csv\nvariants: [{{messages: [{{role: user, content: "
            "'{{ text }}'}], model: 'remote:m'}]\n"
        )
        run = CliRunner().invoke(main, ["run", str(spec)])
    run_id = run.stdout.split()[1]
    status = CliRunner().invoke(main, ["status", run_id])
    assert "[redacted]" in run.output + status.output  # the echo was there, masked
    with Store(db_path) as store:
        assert tables_holding(store, "0123456789abcdef") == []
    from promptlab.config import Settings
    from promptlab.workbench import Workbench

    with Workbench.open(Settings.from_env()) as wb:
        view = repr(wb.runs.view(run_id))
    logged = "\n".join(r.getMessage() for r in caplog.records)
    for text in (run.output, status.output, view, logged):
        assert "0123456789abcdef" not in text
