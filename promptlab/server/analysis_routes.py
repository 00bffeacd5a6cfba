"""What runs and production logs add up to, and one run read closely: production log
metrics, scores, sessions, a replay's context shards, a run's items and one item,
the run's whole view and its anomaly detectors (`promptlab metrics`, `status --items`,
`status --item`, `status --detect`, `shards`, `repeats`).

Answers are the facade's records (server/typed.py), so the CLI prints them with the
same code as on its own. Metrics per variant or version and comparisons are in
data_routes.py.
"""

from __future__ import annotations

from fastapi import FastAPI, Response

from promptlab.facades.run_view import RunView
from promptlab.records import AlertRecord, ItemPage, LogMetricsRow, ScoreCounts
from promptlab.records.afterrun import AfterRunRecord
from promptlab.records.repeats import RepeatsReport
from promptlab.records.sessions import SessionMetrics, ShardRecord
from promptlab.server.answers import typed_response
from promptlab.views.item import ItemView
from promptlab.workbench import Workbench


def add_analysis_routes(app: FastAPI, wb: Workbench) -> None:
    _add_summary_routes(app, wb)
    _add_run_read_routes(app, wb)


def _add_summary_routes(app: FastAPI, wb: Workbench) -> None:
    """What logs and runs add up to: log metrics, scores, failed after-run work, a
    replay's sessions, repeats and context shards."""

    @app.get("/v1/analysis/log-metrics")
    def log_metrics(prompt: str | None = None, since: str | None = None) -> Response:
        """Per prompt version in the imported production logs: requests, completion, CTR
        and latency percentiles (LogMetricsRows); `since`: 7d, 24h, 30m, 2w or a date."""
        rows = wb.analysis.log_metrics(prompt=prompt, since=since)
        return typed_response(list[LogMetricsRow], rows)

    @app.get("/v1/analysis/scores")
    def scores(run_id: str | None = None) -> Response:
        """Each scorer's scores per variant of `run_id`, or per prompt version across runs
        (ScoreCounts: mean, 95% interval, why some are 0)."""
        return typed_response(list[ScoreCounts], wb.analysis.scores(run_id))

    @app.get("/v1/analysis/after-run-failures")
    def after_run_failures(run_id: str | None = None) -> Response:
        """After-run work that failed, of `run_id` or of the latest runs (AfterRunRecords:
        the run, the work, why)."""
        found = wb.analysis.after_run_failures(run_id)
        return typed_response(list[AfterRunRecord], found)

    @app.get("/v1/runs/{run_id}/sessions")
    def sessions(run_id: str) -> Response:
        """A replayed conversation log per variant: sessions, completed, turns, latency,
        scores (SessionMetrics; none for any other run)."""
        found = wb.analysis.sessions(run_id)
        return typed_response(list[SessionMetrics], found)

    @app.get("/v1/runs/{run_id}/repeats")
    def repeats(run_id: str) -> Response:
        """What the run's repeats of each row say per variant (a RepeatsReport):
        between-repeat spread, token consistency (exact, by field), perplexity."""
        return typed_response(RepeatsReport, wb.analysis.repeats(run_id))

    @app.get("/v1/runs/{run_id}/shards")
    def shards(run_id: str, session: str | None = None) -> Response:
        """A replay's live context shards (of one session): ShardRecords."""
        found = wb.runs.shards(run_id, session)
        return typed_response(list[ShardRecord], found)


def _add_run_read_routes(app: FastAPI, wb: Workbench) -> None:
    """One run read closely: a page of its items, one item, its whole view; its anomaly
    detectors run again."""

    @app.get("/v1/runs/{run_id}/items")
    def items(
        run_id: str,
        status: str | None = None,
        variant: str | None = None,
        error_kind: str | None = None,
        search: str | None = None,
        check: str | None = None,
        offset: int = 0,
        limit: int = 50,
    ) -> Response:
        """A page of the run's items in plan order (at most 1,000), filtered, and how many
        match (an ItemPage): `search` is a key prefix, or text in the row, output or error;
        `check` an output check's status."""
        page = wb.runs.items(
            run_id,
            status=status,
            variant=variant,
            error_kind=error_kind,
            search=search,
            check=check,
            offset=offset,
            limit=limit,
        )
        return typed_response(ItemPage, page)

    @app.get("/v1/runs/{run_id}/items/{key}")
    def item(run_id: str, key: str) -> Response:
        """One item (its key or 8+ hex digits of it): row, variant, result, attempts and
        the messages it was sent as, masked (an ItemView)."""
        return typed_response(ItemView, wb.runs.item(run_id, key))

    @app.get("/v1/runs/{run_id}/view")
    def view(run_id: str) -> Response:
        """The run as `promptlab status RUN_ID` shows it, read as one snapshot (a RunView):
        counts, variants side by side, failures, alerts."""
        return typed_response(RunView, wb.runs.view(run_id))

    @app.post("/v1/runs/{run_id}/anomalies")
    def detect_anomalies(run_id: str) -> Response:
        """Run every anomaly detector over the run's stored results again: its alerts
        become what they find (AlertRecords)."""
        found = wb.analysis.detect_anomalies(run_id)
        return typed_response(list[AlertRecord], found)
