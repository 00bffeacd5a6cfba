"""`wb.analysis`: what runs and production logs add up to, and the feedback counted in it.

Aggregates are computed in DuckDB (promptlab/store/metrics.py), the tests in
promptlab/analysis/stats.py and the comparisons in promptlab/analysis/compare.py; the
Compare page's series and side-by-side pages come from promptlab/store/ too, and its
figures are built in promptlab/views/. Feedback and production logs are imported whole
or not at all (promptlab/data/feedback.py) and counted in metrics and comparisons.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from promptlab.analysis.compare import (
    Comparison,
    compare_logs,
    compare_run,
    control_of,
    parse_since,
    variants_of_versions,
)
from promptlab.analysis.repeats import repeats_of
from promptlab.analysis.strata import compare_across_runs
from promptlab.checks.anomalies import detect, observation_of, schema_fields
from promptlab.data.feedback import LOG_FIELDS, FeedbackImporter, resolve_refs
from promptlab.data.feedback_events import LIVE_SOURCE, event_rows, events_of
from promptlab.errors import PromptlabError
from promptlab.facades.context import Context
from promptlab.facades.decisions import Decisions
from promptlab.records import AlertRecord, LogMetricsRow, MetricsRow, ScoreCounts
from promptlab.records.afterrun import AfterRunRecord
from promptlab.records.repeats import RepeatsReport
from promptlab.records.sessions import SessionMetrics
from promptlab.store import RunStore
from promptlab.store.afterrun import AfterRunStore
from promptlab.store.alerts import AlertStore
from promptlab.store.feedback_events import FeedbackEventTables
from promptlab.store.metrics import MetricsReads
from promptlab.store.repeats import RepeatReads
from promptlab.store.result_runs import ResultRuns, RunWithResults
from promptlab.store.scores import ScoreStore
from promptlab.store.sessions import SessionReads
from promptlab.store.side_by_side import SideBySidePage, SideBySideReads, SideBySideRow
from promptlab.store.timeseries import TimeSeries, TimeseriesReads
from promptlab.store.unit_samples import SampleReads

__all__ = [
    "Analysis",
    "Comparison",
    "LOG_FIELDS",
    "RunWithResults",
    "SideBySidePage",
    "SideBySideRow",
    "TimeSeries",
]


def _since(since: datetime | str | None, now: datetime) -> datetime | None:
    """`since` as given: a datetime, or `7d`, `24h` before `now`, a date (`parse_since`)."""
    return parse_since(since, now) if isinstance(since, str) else since


class Analysis:
    """Metrics, comparisons, the Compare page's reads, feedback, anomaly alerts."""

    def __init__(self, context: Context) -> None:
        self._context = context
        self._reads = context.reads
        self._metrics = MetricsReads(context.store)
        self._samples = SampleReads(context.store)
        self._alerts = AlertStore(context.store)
        #: The same input (row, repeat) as each variant answered it, a page at a time:
        #: `side_by_side(run_id, offset=0, limit=10, only_different=False)`.
        self.side_by_side = SideBySideReads(context.store).page
        #: The final look at two versions in the logs, taken once: `decide`, `get`.
        self.decisions = Decisions(context, self.compare_versions, self._version_label)

    @functools.cached_property
    def _feedback(self) -> FeedbackImporter:
        return FeedbackImporter(self._context.store, self._context.registry)

    # ---- metrics and comparisons ---------------------------------------------------

    def metrics(
        self,
        run_id: str | None = None,
        prompt: str | None = None,
        since: datetime | str | None = None,
    ) -> list[MetricsRow]:
        """Items, completion, failures by kind, latency percentiles, tokens and cost.

        With `run_id`, one row per variant of that run; otherwise one row per prompt
        version and model across runs (`prompt` keeps one prompt's versions). `since`
        (a datetime, or `7d`, `24h`, a date) keeps results finished from then on.
        """
        when = _since(since, self._context.store.clock.now())
        if run_id is not None:
            rows = self._metrics.run_metrics(run_id, when)
            return [r for r in rows if prompt is None or r.prompt_name == prompt]
        return self._metrics.version_metrics(prompt, when)

    def compare(
        self,
        run_id: str,
        variant_a: str | None = None,
        variant_b: str | None = None,
        sequential: bool | None = None,
        planned_units: int | None = None,
        keep_shared: bool = False,
    ) -> Comparison:
        """Each variant of the run against control (or B against A), per unit, with
        significance; always-valid while the run is not finished (tuned to
        `planned_units` per arm, default what the run plans) unless `sequential` says
        otherwise; units a split assigned to both arms left out unless `keep_shared`.
        See promptlab/analysis/compare.py for the methods."""
        run = self._reads.run(run_id)
        metrics = self._metrics.run_metrics(run_id)
        return compare_run(
            self._metrics,
            self._samples,
            run,
            metrics,
            variant_a,
            variant_b,
            sequential,
            planned_units,
            keep_shared,
        )

    def log_metrics(
        self, prompt: str | None = None, since: datetime | str | None = None
    ) -> list[LogMetricsRow]:
        """Per prompt version in the imported production logs: requests, latency
        percentiles, completion and CTR (clicks over requests), each rate with Wilson."""
        return self._metrics.log_metrics(prompt, _since(since, self._context.store.clock.now()))

    def compare_versions(
        self,
        ref_a: str,
        ref_b: str,
        *,
        run_id: str | None = None,
        logs: bool = False,
        since: datetime | str | None = None,
        sequential: bool | None = None,
        cuped: bool = False,
        planned_units: int | None = None,
        keep_shared: bool = False,
    ) -> Comparison:
        """Version B against version A (references or ids): in one run (`run_id`: its
        variants of these versions), in the production logs (`logs`), or within each
        run holding both (promptlab/analysis/strata.py). `sequential` (always-valid,
        for data still arriving, tuned to `planned_units` per arm) defaults to True for
        logs, else to whether a run is unfinished; `cuped` uses each unit's logs before
        `since` as a covariate; units seen under both versions are left out unless
        `keep_shared`."""
        if run_id is not None and logs:
            raise PromptlabError("compare versions in a run or in the logs, not both")
        if run_id is not None and since is not None:
            raise PromptlabError("--since applies across runs or to the logs, not to one run")
        a, b = self._version_label(ref_a), self._version_label(ref_b)
        when = _since(since, self._context.store.clock.now())
        if logs:
            return compare_logs(
                self._metrics,
                self._samples,
                a,
                b,
                since=when,
                sequential=True if sequential is None else sequential,
                cuped=cuped,
                planned_units=planned_units,
                keep_shared=keep_shared,
            )
        if cuped:
            raise PromptlabError(
                "CUPED needs production logs and --since (the pre-period is "
                "each unit's logs before it)"
            )
        if run_id is None:
            return compare_across_runs(
                self._metrics,
                self._samples,
                a,
                b,
                self._reads.run,
                since=when,
                sequential=bool(sequential),
                planned_units=planned_units,
                keep_shared=keep_shared,
            )
        return self._compare_in_run(run_id, (a, b), sequential, planned_units, keep_shared)

    def _compare_in_run(
        self,
        run_id: str,
        versions: tuple[tuple[str, str], tuple[str, str]],
        sequential: bool | None,
        planned_units: int | None,
        keep_shared: bool,
    ) -> Comparison:
        """The run's variant of version B against its variant of version A (each
        (version id, label)); PromptlabError unless each version is one variant."""
        # One run's variants are compared on everything they finished, as `compare --run`.
        metrics = self._metrics.run_metrics(run_id)
        variant_a, variant_b = variants_of_versions(run_id, metrics, versions)
        run = self._reads.run(run_id)
        return compare_run(
            self._metrics,
            self._samples,
            run,
            metrics,
            variant_a,
            variant_b,
            sequential,
            planned_units,
            keep_shared,
        )

    def _version_label(self, ref: str) -> tuple[str, str]:
        """(version id, `name@semver`) of a reference; a stored id stands for itself."""
        if ref.startswith("sha256:") and "@" not in ref:
            return ref, ref[:19]
        version = self._context.registry.resolve(ref)
        return version.id, version.ref

    # ---- the Compare page's reads ----------------------------------------------------

    def has_results(self) -> bool:
        """True once any run stored a result: the app then opens on the Compare page."""
        return ResultRuns(self._context.store).has_results()

    def runs_with_results(
        self, limit: int = 50, include: str | None = None
    ) -> list[RunWithResults]:
        """The newest runs that have results, newest first, with their variants; `include`
        names a run listed too however old (a link to it)."""
        return ResultRuns(self._context.store).runs_with_results(limit, include)

    def control_variant(self, run_id: str, variants: list[str]) -> str:
        """The variant `compare` takes as control: the experiment's, else the first."""
        return control_of(self._reads.run(run_id), variants)

    def latencies(self, run_id: str, variant: str) -> Any:
        """Latencies (ms) of the variant's succeeded results, as a NumPy float array."""
        return self._metrics.latencies(run_id, variant)

    def metrics_over_time(self, run_id: str) -> TimeSeries:
        """Completion rate and p90 latency per variant per time bucket (unit from the span)."""
        return TimeseriesReads(self._context.store).run_series(run_id)

    def log_latencies(self, ref: str, since: datetime | str | None = None) -> Any:
        """Latencies (ms) of a version's production log lines (from `since` on), as a
        NumPy float array: the logs' ECDF, as `latencies` is a run variant's."""
        version_id, _ = self._version_label(ref)
        when = _since(since, self._context.store.clock.now())
        return self._metrics.log_latencies(version_id, when)

    def log_metrics_over_time(
        self, refs: list[str], since: datetime | str | None = None
    ) -> TimeSeries:
        """Completion rate and p90 latency of each version's production log lines per
        time bucket of their event time (from `since` on); buckets name the version
        `name@semver`, as `log_metrics` rows are labelled."""
        versions = [self._version_label(ref) for ref in refs]
        when = _since(since, self._context.store.clock.now())
        return TimeseriesReads(self._context.store).log_series(versions, when)

    # ---- feedback and production logs ----------------------------------------------

    def import_feedback(self, path: str | Path) -> int:
        """Import feedback events (CSV, JSON Lines, Parquet); returns how many rows.
        (Events sent live, one or a batch at a time: `record_feedback_events`.)"""
        count = self._feedback.import_feedback(path)
        self._context.audit_change(
            "feedback.imported",
            self._context.author(),
            {"file": Path(path).name, "rows": count},
        )
        return count

    def import_logs(self, path: str | Path, columns: Mapping[str, str] | None = None) -> int:
        """Import a production request log; `columns` maps a field (version, unit_id,
        latency_ms, clicked, completed, event_time) to the file's column for it."""
        count = self._feedback.import_logs(path, columns)
        self._context.audit_change(
            "logs.imported",
            self._context.author(),
            {"file": Path(path).name, "rows": count, "columns": dict(columns or {})},
        )
        return count

    def record_feedback_events(self, body: Any) -> tuple[int, int]:
        """Store feedback events sent live (`POST /v1/feedback/events`): `body` is one
        event or `{"events": [...]}` (at most 1,000), each about a gateway call (`trace`)
        or a version and a unit (promptlab/data/feedback_events.py). Every event is
        stored or none (FeedbackError names `events[i].field`); an event id stored before
        is skipped. Returns (accepted, duplicates)."""
        events = events_of(body)
        tables = FeedbackEventTables(self._context.store)
        refs = {e.version for e in events if e.version is not None}
        versions = resolve_refs(
            refs, tables.known_version_ids(refs), lambda ref: self._context.registry.resolve(ref).id
        )
        calls = tables.calls(e.trace for e in events if e.trace is not None)
        now = self._context.store.clock.now()
        rows = event_rows(events, versions, calls, now)
        accepted = tables.insert(rows, now)
        if accepted:
            self._context.audit_change(
                "feedback.received",
                self._context.author(),
                {"source": LIVE_SOURCE, "events": accepted, "duplicates": len(rows) - accepted},
            )
        return accepted, len(rows) - accepted

    def rate_result(self, run_id: str, key: str, kind: str) -> None:
        """Record a rating given in the app (thumbs_up, thumbs_down, click) on a result,
        by the configured author: one thumb per person and result, the latest replacing
        the earlier (the same thumb again changes nothing); each click counts."""
        author = self._context.author()
        if self._feedback.rate(run_id, key, kind, by=author):
            self._context.audit_change(
                "feedback.rated", author, {"key": key, "kind": kind}, run_id=run_id
            )

    def result_feedback(self, run_id: str, key: str) -> dict[str, int]:
        """How many feedback events of each kind a result has (imported or rated here)."""
        return self._feedback.tables.counts(run_id, key)

    # ---- scores against expected answers (promptlab/evaluation/) -------------------------

    def scores(self, run_id: str | None = None) -> list[ScoreCounts]:
        """Each scorer's scores per variant of `run_id`, or per prompt version across
        runs: how many were scored, the mean (an accuracy when every score is 0 or 1),
        its 95% interval, and how many were wrong for no output or a malformed one."""
        if run_id is not None:
            self._reads.run(run_id)  # an unknown run is an error, not an empty list
        return ScoreStore(self._context.store).counts(run_id)

    def after_run_failures(self, run_id: str | None = None) -> list[AfterRunRecord]:
        """After-run work that failed (promptlab/evaluation/ended.py), of `run_id` or of
        the latest runs, newest first."""
        if run_id is not None:
            self._reads.run(run_id)
        return AfterRunStore(self._context.store).failed(run_id)

    def sessions(self, run_id: str) -> list[SessionMetrics]:
        """A replayed conversation log per session and variant: sessions completed
        (every turn), turns, session latency, scores (empty for any other run)."""
        self._reads.run(run_id)
        return SessionReads(self._context.store).per_variant(run_id)

    def repeats(self, run_id: str) -> RepeatsReport:
        """What the run's repeats of each row say per variant (analysis/repeats.py):
        between-repeat spread of latency and tokens, completion agreement, token
        consistency (exact and per JSON field) and perplexity (None without
        log-probabilities), with each row's mean and spread for the chart."""
        self._reads.run(run_id)  # an unknown run is an error, not an empty report
        results = RepeatReads(self._context.store).results(run_id)
        repeats = max((r.repeat + 1 for rows in results.values() for r in rows), default=0)
        return RepeatsReport(run_id, repeats, tuple(repeats_of(results)))

    # ---- anomaly alerts ------------------------------------------------------------

    def alerts(self, run_id: str) -> list[AlertRecord]:
        """The run's stored alerts (raised live by the engine or by `detect_anomalies`)."""
        self._reads.run(run_id)  # an unknown run is an error, not an empty list
        return self._alerts.for_run(run_id)

    def detect_anomalies(self, run_id: str) -> list[AlertRecord]:
        """Run every detector over the run's stored results in finishing order; the run's
        alerts become what it finds (running it again gives the same alerts)."""
        self._reads.run(run_id)
        expected = {
            v.name: schema_fields(v.template.get("output_schema"))
            for v in RunStore(self._context.store).variants(run_id)
        }
        stream = (observation_of(*row) for row in self._alerts.finished_stream(run_id))
        found = list(detect(run_id, stream, expected, now=self._context.store.clock.now))
        self._alerts.replace(run_id, found)
        return found
