"""The Runs page offers a finished run's metrics, items and results as downloads."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from promptlab.engine import parse_spec_text
from promptlab.errors import ExportError
from promptlab.ui.resources import get_workbench
from tests.test_page_runs import PAGE, TIMEOUT_S, spec_text, write_rows


def test_a_finished_run_has_download_buttons_for_its_tables(tmp_path: Path) -> None:
    engine = get_workbench().engine
    run_id = engine.submit(parse_spec_text(spec_text(write_rows(tmp_path))))
    assert engine.wait(run_id, timeout=TIMEOUT_S).status == "completed"
    at = AppTest.from_file(PAGE, default_timeout=TIMEOUT_S).run()
    assert not at.exception
    for table in ("metrics", "items", "results"):
        button = at.button(key=f"download_{table}_{run_id}::make")
        assert button.label == ("Download metrics" if table == "metrics" else f"Download {table}")
        assert at.selectbox(key=f"download_{table}_{run_id}::format").value == "csv"
    assert not at.get("download_button")  # nothing is made before it is asked for
    # The file is made when asked for, then saved from a file served at a fixed address
    # (not a deferred one, which each redraw of the page replaced), with no rerun.
    at.selectbox(key=f"download_results_{run_id}::format").set_value("parquet").run()
    at.button(key=f"download_results_{run_id}::make").click().run()
    assert not at.exception
    picked = next(b for b in at.get("download_button") if b.key.startswith("download_results"))
    assert picked.proto.url and not picked.proto.deferred_file_id
    assert picked.proto.ignore_rerun and picked.label.startswith("Save file (")
    wb = get_workbench()
    assert wb.exports.file_name("results", "parquet", run_id=run_id) == (
        f"results-run-{run_id}.parquet"
    )
    assert wb.exports.table_bytes("results", "parquet", run_id=run_id)[:4] == b"PAR1"


def test_the_download_makes_the_export_s_file_or_says_why_not(tmp_path: Path) -> None:
    wb = get_workbench()
    run_id = wb.engine.submit(parse_spec_text(spec_text(write_rows(tmp_path))))
    assert wb.runs.wait(run_id, timeout=TIMEOUT_S).status == "completed"
    csv = wb.exports.table_bytes("items", "csv", run_id=run_id)
    assert csv.decode().splitlines()[0].startswith("key,run_id,seq,row_index,row_number,variant")
    assert len(csv.decode().splitlines()) == 1 + 3
    # A refused export raises: the page shows why (tests/test_issue22_downloads.py).
    with pytest.raises(ExportError, match="give --run or --experiment"):
        wb.exports.table_bytes("comparisons", "csv")
