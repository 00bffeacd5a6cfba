"""No exported file holds an API key: not one a server echoed, not one stored some other way."""

from __future__ import annotations

import shutil
from pathlib import Path

import duckdb
import pytest
import yaml
from click.testing import CliRunner

from promptlab.cli import main
from promptlab.config import Settings
from promptlab.data.export import exporters
from promptlab.store import Store
from promptlab.workbench import Workbench
from tests.test_engine_secrets import KEY, run_with_echoed_key

#: What would give the key away (KEY minus its `sk-` shape, which is masked anyway).
NEEDLE = "0123456789abcdef"
READERS = {"parquet": "read_parquet", "csv": "read_csv", "jsonl": "read_json"}


def text_of(path: Path, fmt: str) -> str:
    """Everything in the file as text: its bytes, and its rows as DuckDB reads them
    (Parquet compresses, so its bytes alone could hide a key); a plugin's format (the
    sample's Markdown) by its bytes."""
    if fmt not in READERS:
        return path.read_bytes().decode("utf-8", "replace")
    with duckdb.connect() as con:
        rows = con.execute(f"SELECT * FROM {READERS[fmt]}(?)", [str(path)]).fetchall()
    return path.read_bytes().decode("utf-8", "replace") + repr(rows)


def test_an_echoed_key_reaches_no_exported_file(
    tmp_path: Path, db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id = run_with_echoed_key(tmp_path, monkeypatch).stdout.split()[1]
    written = 0
    for table in ("items", "results", "attempts", "metrics"):
        for fmt in exporters():
            out = tmp_path / f"{table}.{fmt}"
            result = CliRunner().invoke(
                main, ["export", "--run", run_id, "--table", table, "--format", fmt, "-o", str(out)]
            )
            assert result.exit_code == 0, result.output
            assert NEEDLE not in text_of(out, fmt)
            written += 1
    assert written == 4 * len(exporters())
    assert "[redacted]" in text_of(tmp_path / "results.jsonl", "jsonl")  # the message is there


def test_a_key_that_reached_the_store_is_masked_in_every_format(
    runs: tuple[Path, str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A variable named like no secret: only the providers file says it holds a key.
    monkeypatch.setenv("REMOTE_LLM_PASS", KEY)
    providers = tmp_path / "providers.yaml"
    providers.write_text(
        yaml.safe_dump(
            {
                "endpoints": {
                    "remote": {
                        "kind": "openai",
                        "base_url": "http://127.0.0.1:9/v1",
                        "api_key_env": "REMOTE_LLM_PASS",
                    }
                }
            }
        )
    )
    db = tmp_path / "leaky.duckdb"
    shutil.copy(runs[0], db)
    with Store(db) as store:
        with store.transaction() as tx:  # as if written before redaction existed
            tx.execute(
                "UPDATE results SET output_text = 'key ' || ? || ' here', "
                "params = json_object('note', ?) WHERE seq = 0",
                [KEY, KEY],
            )
        config = {"PROMPTLAB_DB": str(db), "PROMPTLAB_PROVIDERS": str(providers)}
        with Workbench(store, Settings.from_env(config)) as wb:
            for fmt in exporters():
                out = tmp_path / f"results.{fmt}"
                assert wb.exports.write_table("results", fmt, out, run_id=runs[1]) == 40
                text = text_of(out, fmt)
                assert NEEDLE not in text and "key [redacted] here" in text
                assert "[redacted]" in text
