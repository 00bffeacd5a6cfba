"""The Audit page, driven by AppTest over a real run: chain status, filters, the trace
view; and the trace links from the Runs and Compare pages."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import duckdb
from streamlit.testing.v1 import AppTest

from promptlab.errors import ExportError
from promptlab.facades.audit import AuditFilter
from promptlab.workbench import Workbench
from tests.apptest_helpers import shown

ROOT = Path(__file__).resolve().parent.parent
PAGE = str(ROOT / "pages" / "audit.py")
RUNS_PAGE = str(ROOT / "pages" / "runs.py")
COMPARE_PAGE = str(ROOT / "pages" / "compare.py")
TIMEOUT_S = 30


def events_table(at: AppTest) -> Any:
    return next(d.value for d in at.dataframe if d.key == "audit_events_table")


def caption_with(at: AppTest, text: str) -> str:
    return next(c.value for c in at.caption if text in c.value)


def retried_key(db: Path, run_id: str) -> str:
    """An item that failed once or more and then succeeded."""
    with Workbench.open() as wb:
        page = wb.runs.items(run_id, status="succeeded", limit=100)
        return next(r.key for r in page.rows if r.attempts > 1)


def test_filters_narrow_the_events_table(finished_run: str) -> None:
    at = AppTest.from_file(PAGE, default_timeout=TIMEOUT_S).run()
    assert not at.exception
    assert at.success and at.success[0].value.startswith("All 2 chains verified (")
    everything = events_table(at)
    total = int(caption_with(at, "showing").split(" of ")[1].split()[0])
    assert len(everything) == min(total, 500) and total > len(set(everything["trace"])) > 0
    at.selectbox(key="audit_status").set_value("failed").run()
    failed = events_table(at)
    assert 0 < len(failed) < len(everything) and set(failed["status"]) == {"failed"}
    at.selectbox(key="audit_status").set_value("(any)")
    at.selectbox(key="audit_run").set_value(finished_run).run()
    in_run = events_table(at)
    assert set(in_run["run"]) == {finished_run}
    assert len(in_run) < len(everything)  # the change events of no run are gone


def test_the_trace_view_shows_every_stage_and_the_timeline(
    finished_run: str, db_path: Path
) -> None:
    key = retried_key(db_path, finished_run)
    at = AppTest.from_file(PAGE, default_timeout=TIMEOUT_S)
    at.query_params["trace"] = key[:12]  # a prefix does
    at.run()
    assert not at.exception
    shown = [m.value for m in at.markdown]
    assert f"Trace `{key}` · run `{finished_run}`" in shown
    for stage in ("render", "preflight", "routing", "attempt 1", "attempt 2", "response", "final"):
        assert f"**{stage}**" in shown, stage
    # Stage tables have no selection, so AppTest gives them no key: they have `field`.
    fields = {f for d in at.dataframe if "field" in d.value.columns for f in d.value["field"]}
    for field in (
        "template version id",
        "semver",
        "prompt_hash",
        "variables_hash",
        "wait_ms",
        "wait_reason",
        "endpoint",
        "finish_reason",
    ):
        assert field in fields, field
    (chart,) = [e for e in at.get("plotly_chart")]
    figure = json.loads(chart.proto.spec)
    labels = figure["data"][0]["y"]
    assert labels[0].startswith(("wait 1", "attempt 1")) and labels[-1] == "result"
    assert "attempt 2" in labels
    assert any("Summarize: ticket alpha-" in c.value for c in at.code)  # the prompt sent
    assert at.query_params["trace"] == [key] or at.query_params["trace"] == key


def test_a_tampered_event_is_named_in_the_chain_status(finished_run: str, db_path: Path) -> None:
    con = duckdb.connect(str(db_path))
    try:
        con.execute(
            "UPDATE audit_events SET payload = json_object('status', 'succeeded') "
            "WHERE chain = ? AND seq = 3",
            [f"run:{finished_run}"],
        )
        (event_id,) = con.execute(
            "SELECT event_id FROM audit_events WHERE chain = ? AND seq = 3",
            [f"run:{finished_run}"],
        ).fetchone() or ("",)
    finally:
        con.close()
    at = AppTest.from_file(PAGE, default_timeout=TIMEOUT_S).run()
    assert not at.exception
    (error,) = at.error
    assert "1 of 2 chains broken" in error.value
    assert f"chain run:{finished_run}: event seq 3 ({event_id}) modified" in shown(error.value)


def test_the_download_holds_every_filtered_event_and_is_recorded(finished_run: str) -> None:
    with Workbench.open() as wb:
        where = AuditFilter(run_id=finished_run, limit=5)
        before = wb.audit.count(where)
        data = wb.audit.export_bytes(where)
        lines = [json.loads(line) for line in data.decode().splitlines()]
        assert len(lines) == before > 5  # the limit is the table's, not the file's
        assert {line["run_id"] for line in lines} == {finished_run}
        (recorded,) = wb.audit.events(AuditFilter(kind="table.exported"))
        assert recorded.payload["path"] == "download" and recorded.payload["rows"] == len(lines)


def test_the_runs_item_view_links_to_its_trace(finished_run: str, db_path: Path) -> None:
    key = retried_key(db_path, finished_run)
    at = AppTest.from_file(RUNS_PAGE, default_timeout=TIMEOUT_S)
    at.query_params["run"] = finished_run
    at.query_params["item"] = key
    at.run()
    assert not at.exception
    assert any(
        m.value == f":material/verified: [Open its audit trace](audit?trace={key})"
        for m in at.markdown
    )


def test_each_side_by_side_output_links_to_its_trace(finished_run: str) -> None:
    at = AppTest.from_file(COMPARE_PAGE, default_timeout=TIMEOUT_S)
    at.query_params["tab"] = "Outputs"  # side by side is on the Outputs tab
    at.run()
    assert not at.exception
    links = [c.value for c in at.caption if "[trace](audit?trace=" in c.value]
    assert len(links) >= 2
    keys = [link.split("audit?trace=")[1].rstrip(")") for link in links]
    with Workbench.open() as wb:
        for key in keys:
            assert wb.audit.trace(key).run_id == finished_run


def test_a_selection_too_large_to_download_says_so_and_is_refused(
    finished_run: str, monkeypatch: Any
) -> None:
    import promptlab.facades.audit as audit_facade

    monkeypatch.setattr(audit_facade, "MAX_DOWNLOAD_EVENTS", 3)
    at = AppTest.from_file(PAGE, default_timeout=TIMEOUT_S)
    at.run()
    assert not at.exception
    assert not [b for b in at.get("download_button") if b.proto.id.endswith("audit_download")]
    assert any("more than a download holds (3)" in i.value for i in at.info)
    with Workbench.open() as wb:
        try:
            wb.audit.export_bytes(AuditFilter(run_id=finished_run))
        except ExportError as exc:
            assert "promptlab audit export" in str(exc)
        else:
            raise AssertionError("a download over the bound was built")
        assert wb.audit.events(AuditFilter(kind="table.exported")) == []
