"""The facade the pages and the CLI call for everything they show or do.

One Workbench per database: prompts (the registry's rules), runs (through one shared
engine, started when first needed), and what runs add up to (typed read models, read
as one consistent snapshot). Pages and commands import this module and `promptlab.ui`,
not the store or the engine's internals; the names they need are re-exported here.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import tempfile
import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from promptlab.analysis.compare import (
    Comparison,
    compare_run,
    compare_versions,
    control_of,
    parse_since,
)
from promptlab.analysis.stats import (
    MetricComparison,
    SrmCheck,
    Verdict,
    sample_size_two_proportions,
)
from promptlab.atomicfile import check_target, staged_file
from promptlab.audit.chain import AuditEvent, AuditTrace, VerifyReport, event_record
from promptlab.audit.redact import Redactor, secret_values, watch_env
from promptlab.checks.anomalies import detect, observation_of, schema_fields
from promptlab.checks.validation import CheckStatus
from promptlab.config import PROJECT_ROOT, Settings
from promptlab.data.batchfile import StoredResult, batch_output_lines, first_model
from promptlab.data.datasets import DatasetStore, check_rows
from promptlab.data.demo import (
    DEMO_DATASET,
    DEMO_EXPERIMENT,
    DEMO_FEEDBACK_SOURCE,
    demo_experiment_files,
    demo_feedback_events,
    load_demo_datasets,
    load_demo_prompts,
)
from promptlab.data.export import (
    COMPARISON_COLUMNS,
    METRICS_COLUMNS,
    STORED_TABLES,
    ExportFilters,
    arrow_table,
    check_format,
    check_table,
    comparison_records,
    file_name,
    metrics_record,
)
from promptlab.data.feedback import LOG_FIELDS, FeedbackImporter
from promptlab.engine import (
    Engine,
    RunProgress,
    RunSpec,
    load_spec,
    parse_spec,
)
from promptlab.engine.estimate import RunEstimate, VariantEstimate
from promptlab.engine.limiter import LimiterState
from promptlab.engine.planner import KEY_HEX_DIGITS
from promptlab.engine.spill import spill_dirs, store_spills
from promptlab.engine.trace import is_lean, trace_details
from promptlab.errors import (
    ConfigError,
    DatabaseLockedError,
    DatasetError,
    ExperimentError,
    ExportError,
    FeedbackError,
    NotFoundError,
    PromptExistsError,
    PromptlabError,
    RegistryError,
    SpecError,
    StoreError,
    TemplateError,
    VariableError,
    VariableProblem,
)
from promptlab.experiments.config import (
    Assignment,
    ExperimentConfig,
    ExperimentFile,
    ExperimentVariant,
    Exposure,
    allocate,
    assign,
    bucket_of,
    check_exposure,
    config_from_mapping,
    config_json,
    describe_changes,
    export_yaml,
    exposure_line,
    load_experiment_config,
    load_experiment_file,
    parse_experiment_file,
    read_exposures,
)
from promptlab.prompts.create import create_prompt
from promptlab.prompts.files import (
    PromptFile,
    dump_yaml_mapping,
    export_prompt,
    import_prompt_file,
    load_prompt_file,
    parse_yaml_mapping,
)
from promptlab.prompts.registry import PromptVersion, Registry, SaveResult
from promptlab.prompts.templates import ROLES, Template, coerce_text_values
from promptlab.providers.config import check_model_ref, load_endpoints
from promptlab.records import (
    FINAL_RUN_STATUSES,
    AlertRecord,
    DatasetInfo,
    FailureExample,
    FieldFailure,
    ItemCounts,
    ItemPage,
    ItemRow,
    ItemStatus,
    LogMetricsRow,
    MetricsRow,
    RowCheck,
    RowProblem,
    RunRecord,
    RunStatus,
    RunSummary,
    RunWithCounts,
    VariantSummary,
)
from promptlab.store import ItemStore, ReadModels, RunStore, Store
from promptlab.store.alerts import AlertStore
from promptlab.store.audit import AuditFilter, AuditLog
from promptlab.store.audit_page import AuditPageReads
from promptlab.store.experiments import AssignmentCount, ExperimentStore, StoredRevision
from promptlab.store.export import ExportStore
from promptlab.store.metrics import MetricsReads
from promptlab.store.result_runs import ResultRuns, RunWithResults
from promptlab.store.side_by_side import SideBySidePage, SideBySideReads, SideBySideRow
from promptlab.store.timeseries import TimeSeries, TimeseriesReads
from promptlab.views.audit import (
    ChainSummary,
    TimelineBar,
    TraceStage,
    chain_summary,
    event_rows,
    stage_rows,
    timeline_bars,
    trace_stages,
)
from promptlab.views.audit_charts import trace_timeline_chart
from promptlab.views.charts import (
    RATE_METRICS,
    forest_chart,
    latency_ecdf_chart,
    latency_percentiles_chart,
    over_time_chart,
    rate_chart,
)
from promptlab.views.compare import (
    VERDICT_ICONS,
    srm_figures,
    summary_rows,
    units_needed,
    units_needed_text,
)
from promptlab.views.item import (
    ItemKeyError,
    ItemView,
    ambiguous,
    check_key_prefix,
    item_request,
    masked,
)
from promptlab.views.textdiff import word_diff_html
from promptlab.yamlio import parse_yaml, read_yaml

#: Failed items a run view lists with their messages (the counts cover them all).
FAILURES_SHOWN = 10


@dataclass(frozen=True)
class RunView:
    """One run as the Runs page and `promptlab status` show it, read as one snapshot.

    Counts, totals, per-variant figures and failures all come from the same committed
    state of the store, so they agree; throughput, ETA and limiter state are live
    figures of the engine, present while the run is active.
    """

    run: RunRecord
    status: str
    reason: str | None
    counts: ItemCounts
    summary: RunSummary
    variants: list[VariantSummary]
    failure_kinds: dict[str, int]
    failures: list[FailureExample]
    events: list[tuple[RunStatus, str | None, datetime]]
    #: When the run last started running: later than `run.started_at` after a resume.
    last_started_at: datetime | None
    active: bool = False
    throughput_per_s: float | None = None
    eta_s: float | None = None
    limiters: tuple[LimiterState, ...] = ()
    #: The output paths that fail their check most, per variant (see `field_failures`).
    field_failures: tuple[FieldFailure, ...] = ()
    #: Anomalies seen in the run's results (promptlab.checks.anomalies), oldest items first.
    alerts: tuple[AlertRecord, ...] = ()

    @property
    def run_id(self) -> str:
        return self.run.run_id

    @property
    def total(self) -> int:
        return self.run.total_items

    @property
    def fraction_closed(self) -> float:
        """Share of items with their final row (succeeded, failed or cancelled)."""
        return self.counts.finished / self.total if self.total else 0.0

    @property
    def resumed(self) -> bool:
        started = self.run.started_at
        return started is not None and self.last_started_at not in (None, started)

    @property
    def wall_time_s(self) -> float | None:
        """From the first start to the finish, resumes and the gaps between them included."""
        if self.run.started_at is None or self.run.finished_at is None:
            return None
        return (self.run.finished_at - self.run.started_at).total_seconds()

    @property
    def last_part_s(self) -> float | None:
        """From the last (re)start to the finish."""
        if self.last_started_at is None or self.run.finished_at is None:
            return None
        return (self.run.finished_at - self.last_started_at).total_seconds()

    @property
    def can_cancel(self) -> bool:
        return self.active or self.status not in FINAL_RUN_STATUSES

    @property
    def can_resume(self) -> bool:
        return not self.active and self.status != RunStatus.COMPLETED


log = logging.getLogger(__name__)
#: How long closing waits for the demo run's clicks to be written.
DEMO_FEEDBACK_JOIN_S = 30.0


class Workbench:
    """Prompts, runs and their summaries over one database; see the module docstring."""

    def __init__(
        self,
        store: Store,
        settings: Settings | None = None,
        *,
        engine: Engine | None = None,
        owns_store: bool = False,
    ) -> None:
        self.store = store
        self.settings = settings or Settings.from_env()
        #: Versions, labels, references and diffs: the registry's rules.
        self.prompts = Registry(store)
        self._reads = ReadModels(store)
        self._datasets = DatasetStore(store)
        self._engine = engine
        self._owns_store = owns_store
        self._demo_thread: threading.Thread | None = None
        self._store_spills()

    @classmethod
    def open(cls, settings: Settings | None = None) -> Workbench:
        """A workbench on the settings' database file, which it closes on `close()`."""
        settings = settings or Settings.from_env()
        return cls(Store(settings.db_path), settings, owns_store=True)

    def close(self) -> None:
        """Stop the engine (if it was started) and close the database if this opened it."""
        if self._engine is not None:
            self._engine.close()
            self._engine = None
        if self._demo_thread is not None:
            # It may be writing the demo's clicks: the store stays open until it is done.
            self._demo_thread.join(DEMO_FEEDBACK_JOIN_S)
            self._demo_thread = None
        if self._owns_store:
            self.store.close()

    def _store_spills(self) -> None:
        """Store the answers an earlier process had to spill (a full disk): the next
        command on the database does, whatever it is, not only `resume`."""
        try:
            store_spills(ItemStore(self.store), spill_dirs(self.store.path))
        except StoreError as exc:
            # Reading still works; the engine refuses to resume a run until they are stored.
            log.warning("%s", exc)

    def __enter__(self) -> Workbench:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- prompts -------------------------------------------------------------------

    def create_prompt(
        self, name: str, template: Template, *, message: str = "", description: str = ""
    ) -> SaveResult:
        """Version 1.0.0 of a new prompt; see `promptlab.prompts.create.create_prompt`."""
        result = create_prompt(
            self.prompts,
            name,
            template,
            author=self.settings.author,
            message=message,
            description=description,
        )
        self._audit_saved(result)
        return result

    def save_version(
        self, name: str, template: Template, *, message: str = "", version: str | None = None
    ) -> SaveResult:
        """A new version of an existing prompt, authored by the configured author."""
        result = self.prompts.save_version(
            name, template, author=self.settings.author, message=message, version=version
        )
        self._audit_saved(result)
        return result

    def set_label(self, name: str, ref: str, label: str) -> PromptVersion:
        version = self.prompts.set_label(name, ref, label, actor=self.settings.author)
        self._audit_change(
            "label.moved",
            self.settings.author,
            {"prompt": name, "label": label, "version_id": version.id, "ref": version.ref},
        )
        return version

    def import_prompt(self, prompt: PromptFile, author: str | None = None) -> list[SaveResult]:
        """Save a checked prompt file's versions and labels (see `load_prompt_file`)."""
        results = import_prompt_file(self.prompts, prompt, author or self.settings.author)
        for result in results:
            self._audit_saved(result, author)
        return results

    def export_prompt(self, name: str) -> str:
        return export_prompt(self.prompts, name)

    def load_demo(self) -> list[SaveResult]:
        """The demo prompts, datasets and experiments; what is already there is kept."""
        results = load_demo_prompts(self.prompts)
        self.load_demo_datasets()
        present = {c.name for c in self.experiments()}
        for path in demo_experiment_files():
            experiment = load_experiment_file(path)
            if experiment.name not in present:
                self.add_experiment(experiment, note="demo")
        return results

    def start_demo_run(self) -> str | None:
        """Run the demo experiment on the demo dataset, once, into a database with no runs.

        It runs for real through the simulated model, so a newcomer's first look shows
        a finished A/B experiment. Returns the run id, or None when there was nothing to do.
        """
        names = {c.name for c in self.experiments()}
        if DEMO_EXPERIMENT not in names or self.list_runs(limit=1):
            return None
        if DEMO_DATASET not in {d.name for d in self.datasets()}:
            return None
        spec = self.experiment_run_spec(
            DEMO_EXPERIMENT, DEMO_DATASET, run_name=f"demo: {DEMO_EXPERIMENT} on {DEMO_DATASET}"
        )
        run_id = self.start_run(spec)
        # The run goes on in the background: its simulated clicks are recorded once it ends.
        self._demo_thread = threading.Thread(
            target=self._demo_feedback_when_done,
            args=(self.engine, run_id),
            name="demo-feedback",
            daemon=True,
        )
        self._demo_thread.start()
        return run_id

    def record_demo_feedback(self, run_id: str) -> int:
        """Simulated impressions and clicks for a finished demo run's results (a different
        click-through per variant, seeded by each result's key); once per run. Returns
        how many events were added."""
        return self._feedback.tables.add_run_events(
            run_id, DEMO_FEEDBACK_SOURCE, demo_feedback_events, datetime.now(UTC)
        )

    def _demo_feedback_when_done(self, engine: Engine, run_id: str) -> None:
        # `engine`, not self.engine: once the workbench closes, that would start another.
        try:
            if engine.wait(run_id).status == RunStatus.COMPLETED:
                self.record_demo_feedback(run_id)
        except Exception as exc:  # closed first, or the run failed: the demo has no clicks
            log.warning("demo feedback for run %s not recorded: %s", run_id, exc)

    # ---- runs ----------------------------------------------------------------------

    @property
    def engine(self) -> Engine:
        """The shared engine, started on first use (reading reports needs none)."""
        if self._engine is None:
            self._engine = Engine(self.store, settings=self.settings, registry=self.prompts)
        return self._engine

    def parse_pasted_spec(self, text: str) -> RunSpec:
        """A spec typed into the app: paths from the project folder, data folder only."""
        data = parse_yaml(text, where="run spec", error=SpecError)
        return parse_spec(
            self._with_experiment(data), base_dir=PROJECT_ROOT, dataset_root=self.settings.data_dir
        )

    def load_spec(self, path: Path) -> RunSpec:
        """A spec file; relative paths are relative to it (see `_with_experiment`)."""
        data = read_yaml(path, error=SpecError)
        return parse_spec(self._with_experiment(data), base_dir=path.parent, default_name=path.stem)

    def _with_experiment(self, data: Any) -> Any:
        """`experiment: NAME` (or `NAME@REVISION`) becomes that revision's full config.

        The config is stored with the run, so a resume plans exactly the same split. A
        config given in full must be a stored revision as it is: a run records its
        assignments under that experiment and revision, so an edited copy (another
        salt, other buckets) would falsify them.
        """
        if not isinstance(data, Mapping) or "experiment" not in data:
            return data
        given = data["experiment"]
        if isinstance(given, str):
            name, _, revision = given.partition("@")
            if revision and not revision.isdigit():
                raise SpecError(f"experiment: expected NAME or NAME@REVISION, got {given!r}")
            try:
                config = self.experiment(name, int(revision) if revision else None)
            except ExperimentError as exc:
                raise SpecError(f"experiment: {exc}") from exc
            return {**data, "experiment": config.to_dict()}
        if not isinstance(given, Mapping):
            return data  # parse_spec names the problem
        try:
            config = config_from_mapping(given, source="experiment")
            stored = self.experiment(config.name, config.revision)
        except ExperimentError as exc:
            raise SpecError(f"experiment: {exc}") from exc
        if (stored.content(), stored.allocation) != (config.content(), config.allocation):
            raise SpecError(
                f"experiment: the config given is not revision {config.revision} of "
                f"{config.name} as stored; name it instead "
                f"(experiment: {config.name}@{config.revision})"
            )
        return {**data, "experiment": stored.to_dict()}

    def experiment_run_spec(
        self,
        name: str,
        dataset: str,
        *,
        mode: str | None = None,
        unit_column: str | None = None,
        repeats: int = 1,
        limit_rows: int | None = None,
        run_name: str | None = None,
        skip_invalid_rows: bool = False,
    ) -> RunSpec:
        """A run of the experiment's latest revision on an imported dataset.

        A split run's unit column is the one given, else the experiment's, else the
        dataset's own (set when it was imported).
        """
        config = self.experiment(name)
        data: dict[str, Any] = {
            "name": run_name or f"{name} r{config.revision} on {dataset}",
            "dataset": {"name": dataset},
            "experiment": config.to_dict(),
            "repeats": repeats,
        }
        if mode is not None:
            data["mode"] = mode
        if (mode or config.mode) == "split":
            unit = unit_column or config.unit_column or self.dataset(dataset).unit_column
            if unit:
                data["unit_column"] = unit
        if limit_rows is not None:
            data["limit_rows"] = limit_rows
        if skip_invalid_rows:
            data["skip_invalid_rows"] = True
        return parse_spec(data, base_dir=PROJECT_ROOT, dataset_root=self.settings.data_dir)

    def estimate(self, spec: RunSpec) -> RunEstimate:
        """Requests, tokens, cost and time the run would take, before it starts."""
        return self.engine.estimate(spec)

    def start_run(self, spec: RunSpec) -> str:
        return self.engine.submit(spec)

    def resume_run(self, run_id: str) -> str:
        return self.engine.resume(run_id)

    def cancel_run(self, run_id: str) -> None:
        self.engine.cancel(run_id)

    def wait(self, run_id: str, timeout: float | None = None) -> RunProgress:
        return self.engine.wait(run_id, timeout)

    def is_active(self, run_id: str) -> bool:
        return self._engine is not None and self._engine.is_active(run_id)

    def progress(self, run_id: str) -> RunProgress:
        """Live counts of an active run (stored ones otherwise), for progress bars."""
        return self.engine.status(run_id)

    def batch_spec(
        self, requests: Path, endpoint: str, model: str | None, id_field: str = "custom_id"
    ) -> RunSpec:
        """A run that sends every line of a request file as written (promptlab batch)."""
        model = model or first_model(requests)
        if not model:
            raise SpecError(f"{requests}: no line names a model: give --model")
        variant = {
            "name": "requests",
            "requests": "as_written",
            "id_field": id_field,
            "model": f"{endpoint}:{model}",
        }
        data = {"name": f"batch {requests.name}", "dataset": str(requests.resolve())}
        return parse_spec({**data, "variants": [variant]})

    def write_batch_output(self, run_id: str, path: Path) -> int:
        """The run's results in the OpenAI Batch output format; returns the line count."""
        spec = self._reads.run(run_id).spec
        id_field = next(
            (v.get("id_field", "custom_id") for v in spec.get("variants", [])
             if v.get("requests") == "as_written"),
            None,
        )  # fmt: skip
        if id_field is None:
            raise SpecError(f"run {run_id} does not run a request file")
        results = (
            StoredResult(
                r[0],
                str(json.loads(r[1]).get(id_field)),
                r[2],
                r[3],
                r[4],
                r[5],
                r[6],
                r[7],
                r[8],
                r[9],
            )  # fmt: skip
            for r in self._reads.results_with_rows(run_id)
        )
        count = 0
        try:
            with path.open("w", encoding="utf-8") as handle:
                for line in batch_output_lines(results):
                    handle.write(line + "\n")
                    count += 1
        except OSError as exc:
            raise PromptlabError(f"cannot write {path}: {exc.strerror or exc}") from exc
        return count

    def list_runs(self, limit: int = 50) -> list[RunWithCounts]:
        """The newest runs with their items per state, in one query."""
        return self._reads.list_runs_with_counts(limit)

    def run_view(self, run_id: str, failures: int = FAILURES_SHOWN) -> RunView:
        """Everything shown about one run, from one snapshot of the store."""
        with self._reads.snapshot() as reads:
            run = reads.run(run_id)
            counts = reads.item_counts_of(run_id)
            summary = reads.summary(run_id)
            variants = reads.variant_summaries(run_id)
            kinds = reads.failure_kinds(run_id)
            examples = reads.failure_examples(run_id, failures)
            events = reads.events(run_id)
            last_start = reads.last_start(run_id)
            fields = reads.field_failures(run_id)
        status: str = run.status
        reason = run.status_reason
        live = None
        if self._engine is not None:
            live = self._engine.status(run_id)
            # The engine knows an end the store could not record (a full disk).
            status, reason = live.status, live.reason
        return RunView(
            run=run,
            status=status,
            reason=reason,
            counts=counts,
            summary=summary,
            variants=variants,
            failure_kinds=kinds,
            failures=examples,
            events=events,
            last_started_at=last_start,
            active=bool(live and live.active),
            throughput_per_s=live.throughput_per_s if live and live.active else None,
            eta_s=live.eta_s if live and live.active else None,
            limiters=live.limiters if live and live.active else (),
            field_failures=tuple(fields),
            alerts=tuple(self._alerts.for_run(run_id)),
        )

    def field_failures(self, run_id: str, limit: int = 20) -> list[FieldFailure]:
        """The output paths that fail their check most in a run, per variant."""
        with self._reads.snapshot() as reads:
            reads.run(run_id)  # an unknown run is an error, not an empty list
            return reads.field_failures(run_id, limit)

    # ---- anomaly alerts ------------------------------------------------------------

    @functools.cached_property
    def _alerts(self) -> AlertStore:
        return AlertStore(self.store)

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
            for v in RunStore(self.store).variants(run_id)
        }
        stream = (observation_of(*row) for row in self._alerts.finished_stream(run_id))
        found = list(detect(run_id, stream, expected))
        self._alerts.replace(run_id, found)
        return found

    # ---- one run's items -----------------------------------------------------------

    def run_items(
        self,
        run_id: str,
        *,
        status: str | None = None,
        variant: str | None = None,
        error_kind: str | None = None,
        search: str | None = None,
        check: str | None = None,
        offset: int = 0,
        limit: int = 50,
    ) -> ItemPage:
        """A page of the run's items in plan order; see `ReadModels.items` for the filters."""
        return self._reads.items(
            run_id, status=status, variant=variant, error_kind=error_kind, search=search,
            check=check, offset=offset, limit=limit,
        )  # fmt: skip

    def item_view(self, run_id: str, key: str) -> ItemView:
        """One item: row, variant, result and attempts (one snapshot), and the messages it
        was sent as. `key` may be a prefix of at least 8 hex digits matching one item."""
        key = check_key_prefix(run_id, key)
        with self._reads.snapshot() as reads:
            if len(key) < KEY_HEX_DIGITS:
                keys = reads.item_keys(run_id, key, limit=3)
                if len(keys) > 1:
                    raise ambiguous(run_id, key, keys)
                if not keys:
                    reads.run(run_id)  # an unknown run says so first
                    raise NotFoundError(f"run {run_id} has no item whose key starts with {key!r}")
                key = keys[0]
            detail = reads.item_detail(run_id, key)
        # Rendered from the row as stored, then masked for display like everything shown.
        return masked(detail, item_request(detail.variant, detail.row), self._redactor())

    # ---- metrics and comparisons ---------------------------------------------------
    # Aggregates in DuckDB (promptlab/store/metrics.py), tests in promptlab/analysis/stats.py.

    @functools.cached_property
    def _metric_reads(self) -> MetricsReads:
        return MetricsReads(self.store)

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
        when = parse_since(since) if isinstance(since, str) else since
        if run_id is not None:
            rows = self._metric_reads.run_metrics(run_id, when)
            return [r for r in rows if prompt is None or r.prompt_name == prompt]
        return self._metric_reads.version_metrics(prompt, when)

    def compare(
        self, run_id: str, variant_a: str | None = None, variant_b: str | None = None
    ) -> Comparison:
        """Each variant of the run against control (or B against A), with significance;
        see promptlab/analysis/compare.py for the tests used."""
        run = self._reads.run(run_id)
        metrics = self._metric_reads.run_metrics(run_id)
        return compare_run(self._metric_reads, run, metrics, variant_a, variant_b)

    # ---- feedback and production logs ----------------------------------------------
    # Whole files or nothing (promptlab/data/feedback.py); counted in metrics and compare.

    @functools.cached_property
    def _feedback(self) -> FeedbackImporter:
        return FeedbackImporter(self.store, self.prompts)

    def import_feedback(self, path: str | Path) -> int:
        """Import feedback events (CSV, JSON Lines, Parquet); returns how many rows."""
        count = self._feedback.import_feedback(path)
        self._audit_change(
            "feedback.imported", self.settings.author, {"file": Path(path).name, "rows": count}
        )
        return count

    def import_logs(self, path: str | Path, columns: Mapping[str, str] | None = None) -> int:
        """Import a production request log; `columns` maps a field (version, unit_id,
        latency_ms, clicked, completed, event_time) to the file's column for it."""
        count = self._feedback.import_logs(path, columns)
        self._audit_change(
            "logs.imported",
            self.settings.author,
            {"file": Path(path).name, "rows": count, "columns": dict(columns or {})},
        )
        return count

    def rate_result(self, run_id: str, key: str, kind: str) -> None:
        """Record a rating given in the app (thumbs_up, thumbs_down, click) on a result."""
        self._feedback.rate(run_id, key, kind)
        self._audit_change(
            "feedback.rated", self.settings.author, {"key": key, "kind": kind}, run_id=run_id
        )

    def result_feedback(self, run_id: str, key: str) -> dict[str, int]:
        """How many feedback events of each kind a result has (imported or rated here)."""
        return self._feedback.tables.counts(run_id, key)

    def log_metrics(
        self, prompt: str | None = None, since: datetime | str | None = None
    ) -> list[LogMetricsRow]:
        """Per prompt version in the imported production logs: requests, latency
        percentiles, completion and CTR (clicks over requests), each rate with Wilson."""
        when = parse_since(since) if isinstance(since, str) else since
        return self._metric_reads.log_metrics(prompt, when)

    def compare_versions(
        self,
        ref_a: str,
        ref_b: str,
        *,
        run_id: str | None = None,
        logs: bool = False,
        since: datetime | str | None = None,
    ) -> Comparison:
        """Version B against version A (references or ids): in one run (`run_id`: its
        variants of these versions), in the production logs (`logs`), or across every
        run's results; see promptlab/analysis/compare.py."""
        if run_id is not None and logs:
            raise PromptlabError("compare versions in a run or in the logs, not both")
        if run_id is not None and since is not None:
            raise PromptlabError("--since applies across runs or to the logs, not to one run")
        a, b = self._version_label(ref_a), self._version_label(ref_b)
        when = parse_since(since) if isinstance(since, str) else since
        if run_id is None:
            return compare_versions(self._metric_reads, a, b, logs=logs, since=when)
        # One run's variants are compared on everything they finished, as `compare --run`.
        metrics = self._metric_reads.run_metrics(run_id)
        names = []
        for version_id, label in (a, b):
            found = [m.variant or "" for m in metrics if m.prompt_version_id == version_id]
            if len(found) != 1:
                what = "no variant" if not found else f"variants {', '.join(found)}"
                raise PromptlabError(
                    f"run {run_id} has {what} of {label}: compare its variants by name "
                    f"(promptlab compare --run {run_id} A B)"
                )
            names.append(found[0])
        return compare_run(self._metric_reads, self._reads.run(run_id), metrics, *names)

    def _version_label(self, ref: str) -> tuple[str, str]:
        """(version id, `name@semver`) of a reference; a stored id stands for itself."""
        if ref.startswith("sha256:") and "@" not in ref:
            return ref, ref[:19]
        version = self.prompts.resolve(ref)
        return version.id, version.ref

    # ---- export ------------------------------------------------------------------------
    # COPY to CSV, Parquet or JSON Lines (names and files: promptlab/data/export.py; SQL:
    # promptlab/store/export.py).

    def export_table(
        self,
        table: str,
        fmt: str,
        path: str | Path,
        *,
        run_id: str | None = None,
        experiment: str | None = None,
        prompt: str | None = None,
        force: bool = False,
    ) -> int:
        """Write a table's rows that pass the filters to `path`; return the rows written.

        Tables: items, results, attempts, metrics, comparisons, feedback; formats: csv,
        parquet, jsonl. The file appears whole or not at all (promptlab/atomicfile.py:
        written beside it, unnamed where the system allows, then given its name); an
        existing regular file is replaced only with `force`, anything else never.
        """
        table, fmt = check_table(table), check_format(fmt)
        filters = ExportFilters(run_id, experiment, prompt)
        target = check_target(path, force=force)
        with staged_file(target, force=force) as staged:
            count = self._export_to(table, fmt, staged, filters)
        self._audit_exported(table, fmt, filters, count, target.name)
        return count

    def export_bytes(
        self,
        table: str,
        fmt: str,
        *,
        run_id: str | None = None,
        experiment: str | None = None,
        prompt: str | None = None,
    ) -> bytes:
        """The file `export_table` would write, as bytes (the app's download buttons)."""
        table, fmt = check_table(table), check_format(fmt)
        filters = ExportFilters(run_id, experiment, prompt)
        with tempfile.TemporaryDirectory(prefix="promptlab-export-") as folder:
            temp = Path(folder) / file_name(table, fmt, filters)
            count = self._export_to(table, fmt, temp, filters)
            self._audit_exported(table, fmt, filters, count, "download")
            return temp.read_bytes()

    def comparison_bytes(self, comparison: Comparison, fmt: str) -> bytes:
        """A comparison as it is shown (any control, versions or logs), as a file written
        by the same COPY as `export --table comparisons`."""
        fmt = check_format(fmt)
        records = comparison_records(comparison)
        with tempfile.TemporaryDirectory(prefix="promptlab-export-") as folder:
            temp = Path(folder) / f"comparison.{fmt}"
            count = ExportStore(self.store).copy_rows(
                arrow_table(records, COMPARISON_COLUMNS), fmt, temp, self._export_secrets()
            )
            filters = ExportFilters(comparison.run_id or None, None, None)
            self._audit_exported("comparisons", fmt, filters, count, "download")
            return temp.read_bytes()

    def _audit_exported(
        self, table: str, fmt: str, filters: ExportFilters, rows: int, target: str
    ) -> None:
        self._audit_change(
            "table.exported",
            self.settings.author,
            {"table": table, "format": fmt, "rows": rows, "to": target,
             "experiment": filters.experiment, "prompt": filters.prompt},
            run_id=filters.run_id,
        )  # fmt: skip

    def export_file_name(
        self,
        table: str,
        fmt: str,
        *,
        run_id: str | None = None,
        experiment: str | None = None,
        prompt: str | None = None,
    ) -> str:
        """A file name saying what an export holds, e.g. `results-run-3f2a.parquet`."""
        return file_name(table, fmt, ExportFilters(run_id, experiment, prompt))

    def _export_to(self, table: str, fmt: str, target: Path, filters: ExportFilters) -> int:
        rows = ExportStore(self.store)
        secrets = self._export_secrets()
        if table in STORED_TABLES:
            return rows.copy_table(table, fmt, target, filters, secrets)
        if table == "metrics":
            records = [metrics_record(m) for m in self._export_metrics(rows, filters)]
            return rows.copy_rows(arrow_table(records, METRICS_COLUMNS), fmt, target, secrets)
        if filters.prompt is not None:
            raise ExportError("export: comparisons are per run; --prompt does not apply")
        if filters.run_id is not None:
            run_ids = [filters.run_id]
        elif filters.experiment is not None:
            run_ids = rows.experiment_runs(filters.experiment)
        else:
            raise ExportError("export: comparisons are per run; give --run or --experiment")
        records = [r for run_id in run_ids for r in comparison_records(self.compare(run_id))]
        return rows.copy_rows(arrow_table(records, COMPARISON_COLUMNS), fmt, target, secrets)

    def _export_metrics(self, rows: ExportStore, filters: ExportFilters) -> list[MetricsRow]:
        """Per run variant with a run or an experiment, else per prompt version."""
        if filters.experiment is not None:
            run_ids = rows.experiment_runs(filters.experiment)
            if filters.run_id is not None:
                run_ids = [r for r in run_ids if r == filters.run_id]
            return [m for r in run_ids for m in self.metrics(r, prompt=filters.prompt)]
        return self.metrics(filters.run_id, prompt=filters.prompt)

    def _export_secrets(self) -> list[str]:
        """Values no exported file may hold: keys in the environment and the endpoints'
        `api_key_env` variables, whatever they are called."""
        # A broken providers file: the variables named like *_KEY, *_TOKEN... still count.
        with contextlib.suppress(ConfigError):
            endpoints = load_endpoints(self.settings.providers_file)
            watch_env(c.api_key_env for c in endpoints.values())
        return secret_values()

    def _redactor(self) -> Redactor:
        """Masks what nothing shown may hold: the secret values no export holds (the
        providers file's key variables among them) and every credential-shaped string."""
        return Redactor(self._export_secrets())

    # ---- the Compare page ----------------------------------------------------------
    # Reads behind its charts and side-by-side outputs (promptlab/store/result_runs.py,
    # timeseries.py, side_by_side.py); the figures are built in promptlab/views/charts.py.

    def has_results(self) -> bool:
        """True once any run stored a result: the app then opens on the Compare page."""
        return ResultRuns(self.store).has_results()

    def runs_with_results(self, limit: int = 50) -> list[RunWithResults]:
        """The newest runs that have results, newest first, with their variants."""
        return ResultRuns(self.store).runs_with_results(limit)

    def control_variant(self, run_id: str, variants: list[str]) -> str:
        """The variant `compare` takes as control: the experiment's, else the first."""
        return control_of(self._reads.run(run_id), variants)

    def latencies(self, run_id: str, variant: str) -> Any:
        """Latencies (ms) of the variant's succeeded results, as a NumPy float array."""
        return self._metric_reads.latencies(run_id, variant)

    def metrics_over_time(self, run_id: str) -> TimeSeries:
        """Completion rate and p90 latency per variant per time bucket (unit from the span)."""
        return TimeseriesReads(self.store).run_series(run_id)

    def side_by_side(
        self, run_id: str, offset: int = 0, limit: int = 10, only_different: bool = False
    ) -> SideBySidePage:
        """The same input (row, repeat) as each variant answered it, a page at a time."""
        return SideBySideReads(self.store).page(run_id, offset, limit, only_different)

    # ---- experiments ---------------------------------------------------------------
    # Sticky splits of units over prompt variants (rules in promptlab/experiments/config.py).
    # Every change is a new revision with its author, time and note.

    @functools.cached_property
    def _experiment_rows(self) -> ExperimentStore:
        return ExperimentStore(self.store)

    def add_experiment(
        self, source: str | Path | Mapping[str, Any] | ExperimentFile, *, note: str = ""
    ) -> tuple[ExperimentConfig, bool]:
        """Add an experiment file (a path, its data, or a loaded one) as the next revision.

        Each variant's prompt reference is resolved and its version id pinned (a variant
        that gives `prompt_version_id` keeps that one). The allocation starts from the
        previous revision's, so only the buckets a weight change frees move. A file
        identical to the latest revision (pins included) creates nothing: `created` is
        False and the latest revision is returned.
        """
        if isinstance(source, ExperimentFile):
            experiment = source
        elif isinstance(source, Mapping):
            experiment = parse_experiment_file(source)
        else:
            experiment = load_experiment_file(source)
        self._check_models(experiment)
        return self._save_experiment(self._pin_variants(experiment), note)

    def experiments(self) -> list[ExperimentConfig]:
        """The latest revision of every experiment, by name."""
        return [_stored_config(row) for row in self._experiment_rows.latest_revisions()]

    def experiment(self, name: str, revision: int | None = None) -> ExperimentConfig:
        """One revision of `name` (the latest by default)."""
        rows = self._experiment_rows
        row = rows.latest(name) if revision is None else rows.revision(name, revision)
        if row is None:
            if revision is not None and rows.latest(name) is not None:
                raise ExperimentError(f"experiment {name!r} has no revision {revision}")
            raise ExperimentError(f"no experiment named {name!r}")
        return _stored_config(row)

    def experiment_history(self, name: str) -> list[ExperimentConfig]:
        """Every revision of `name`, newest first (`describe_changes` says what each changed)."""
        rows = self._experiment_rows.revisions(name)
        if not rows:
            raise ExperimentError(f"no experiment named {name!r}")
        return [_stored_config(row) for row in rows]

    def update_experiment(
        self,
        name: str,
        *,
        weights: Mapping[str, float] | None = None,
        ramp: float | None = None,
        killed: bool | None = None,
        note: str = "",
    ) -> ExperimentConfig:
        """A new revision with some weights, the ramp or the kill switch changed.

        Variants not named in `weights` keep theirs; pins and everything else carry
        over. Changing nothing creates nothing and returns the latest revision.
        """
        latest = self.experiment(name)
        data = latest.to_dict()
        for variant_name, weight in (weights or {}).items():
            latest.variant(variant_name)  # an unknown name is an error naming the known ones
            for variant in data["variants"]:
                if variant["name"] == variant_name:
                    variant["weight"] = weight
        if ramp is not None:
            data["ramp"] = ramp
        if killed is not None:
            data["killed"] = killed
        config, _ = self._save_experiment(
            parse_experiment_file(data, source=f"experiment {name}"), note
        )
        return config

    def export_experiment(self, name: str, revision: int | None = None) -> str:
        """The full config of a revision as YAML: what `promptlab assign FILE` reads."""
        return export_yaml(self.experiment(name, revision))

    def import_exposures(self, path: str | Path) -> int:
        """Import an exposure log (JSON Lines); return how many exposures were new.

        Every line is checked against the revision it names (its experiment, variant,
        bucket and pinned version); a bad line refuses the whole file, naming its line,
        and nothing is stored. Exposures already stored are not stored twice.
        """
        path = Path(path)
        configs: dict[tuple[str, int], ExperimentConfig] = {}

        def checked_batches() -> Iterator[list[Exposure]]:
            batch: list[Exposure] = []
            for exposure in read_exposures(path):
                where = f"exposures {path}, line {exposure.line}"
                key = (exposure.experiment, exposure.revision)
                try:
                    if key not in configs:
                        configs[key] = self.experiment(*key)
                    check_exposure(exposure, configs[key])
                except ExperimentError as exc:
                    raise ExperimentError(f"{where}: {exc}") from exc
                batch.append(exposure)
                if len(batch) >= EXPOSURE_BATCH:
                    yield batch
                    batch = []
            yield batch

        added = self._experiment_rows.add_exposures(
            checked_batches(), source=str(path), imported_at=datetime.now(UTC)
        )
        self._audit_change(
            "exposures.imported", self.settings.author, {"source": str(path), "new": added}
        )
        return added

    def exposure_counts(self, name: str) -> dict[tuple[int, str], int]:
        """Distinct units exposed per (revision, variant) of `name`."""
        return self._experiment_rows.exposure_counts(name)

    def assignment_counts(
        self, *, experiment: str | None = None, run_id: str | None = None
    ) -> list[AssignmentCount]:
        """Dataset rows split runs assigned, per experiment, revision, variant."""
        return self._experiment_rows.assignment_counts(experiment=experiment, run_id=run_id)

    def _check_models(self, experiment: ExperimentFile) -> None:
        """Every variant's model is on a configured endpoint (built in or in the providers
        file). An experiment outlives any run, so a run spec's own endpoints do not count."""
        endpoints = load_endpoints(self.settings.providers_file)
        for index, variant in enumerate(experiment.variants):
            if variant.model is None:
                continue
            try:
                check_model_ref(variant.model, endpoints)
            except ConfigError as exc:
                where = f"{experiment.source}: variants[{index}].model"
                raise ExperimentError(f"{where}: {exc}") from exc

    def _pin_variants(self, experiment: ExperimentFile) -> ExperimentFile:
        pinned = []
        for index, variant in enumerate(experiment.variants):
            ref = variant.prompt
            if variant.prompt_version_id is not None:
                ref = f"{variant.prompt.split('@', 1)[0]}@{variant.prompt_version_id}"
            try:
                version = self.prompts.resolve(ref)
            except RegistryError as exc:
                where = f"{experiment.source}: variants[{index}].prompt"
                raise ExperimentError(f"{where}: {exc}") from exc
            pinned.append(replace(variant, prompt_version_id=version.id))
        return replace(experiment, variants=tuple(pinned))

    def _save_experiment(
        self, experiment: ExperimentFile, note: str
    ) -> tuple[ExperimentConfig, bool]:
        latest = self._experiment_rows.latest(experiment.name)
        previous = _stored_config(latest) if latest is not None else None
        if previous is not None:
            if experiment.salt != previous.salt:
                raise ExperimentError(
                    f"{experiment.source}: salt: {experiment.name} was created with salt "
                    f"{previous.salt!r}; a salt never changes (it would move every unit)"
                )
            if experiment.content() == previous.content():
                return previous, False
        config = ExperimentConfig(
            name=experiment.name,
            description=experiment.description,
            salt=experiment.salt,
            revision=previous.revision + 1 if previous else 1,
            mode=experiment.mode,
            unit_column=experiment.unit_column,
            ramp=experiment.ramp,
            killed=experiment.killed,
            variants=experiment.variants,
            allocation=allocate(experiment.weights, previous.allocation if previous else None),
            author=self.settings.author,
            created_at=datetime.now(UTC),
            note=note,
        )
        self._experiment_rows.add_revision(
            config.name,
            config.revision,
            config.salt,
            config_json(config),
            author=config.author,
            created_at=config.created_at,
            note=note,
        )
        self._audit_change(
            "experiment.created" if previous is None else "experiment.changed",
            config.author,
            {
                "experiment": config.name,
                "revision": config.revision,
                "weights": {v.name: v.weight for v in config.variants},
                "ramp": config.ramp,
                "killed": config.killed,
                "note": note,
            },
        )
        return config, True

    # ---- datasets ------------------------------------------------------------------

    def import_dataset(
        self,
        path: str | Path,
        name: str,
        *,
        fmt: str | None = None,
        unit_column: str | None = None,
        replace: bool = False,
    ) -> DatasetInfo:
        """Import a CSV, JSON Lines or Parquet file as a dataset (see promptlab.data.datasets)."""
        info = self._datasets.import_file(
            path, name, fmt=fmt, unit_column=unit_column, replace=replace,
            author=self.settings.author,
        )  # fmt: skip
        self._audit_change(
            "dataset.imported",
            self.settings.author,
            {"dataset": name, "source": str(path), "rows": info.row_count, "replace": replace},
        )
        return info

    def load_demo_datasets(self) -> list[DatasetInfo]:
        """Import the demo datasets missing from the store (`tickets`)."""
        return load_demo_datasets(self._datasets)

    def datasets(self) -> list[DatasetInfo]:
        return self._datasets.list()

    def dataset(self, name: str) -> DatasetInfo:
        return self._datasets.get(name)

    def dataset_preview(self, name: str, limit: int = 20) -> list[dict[str, Any]]:
        """The first rows, to show: any key in a cell is masked (`iter_dataset_rows`)."""
        return list(self.iter_dataset_rows(name, limit))

    def iter_dataset_rows(self, name: str, limit: int | None = None) -> Iterator[dict[str, Any]]:
        """Rows in row order (row 1 first), streamed from the store, as they are shown:
        every key value or credential-shaped string in a cell masked. The store keeps
        the rows as imported (a run renders its prompts from them; the engine reads them
        itself, not through here)."""
        redactor = self._redactor()
        return (redactor.value(row) for row in self._datasets.iter_rows(name, limit))

    def set_dataset_unit_column(self, name: str, column: str | None) -> DatasetInfo:
        return self._datasets.set_unit_column(name, column)

    def delete_dataset(self, name: str) -> None:
        self._datasets.delete(name)

    def check_dataset_rows(self, name: str, prompt_ref: str, listed: int = 100) -> RowCheck:
        """Every row of the dataset checked against a prompt version's variables."""
        template = self.prompts.resolve(prompt_ref).template
        result = check_rows(self._datasets.iter_rows(name), template, listed=listed)
        # A problem may quote the cell (`'sk-...' is not one of ...`): masked like the rows.
        redactor = self._redactor()
        problems = [replace(p, problem=redactor(p.problem)) for p in result.problems]
        return replace(result, problems=problems)

    # ---- audit trail ---------------------------------------------------------------
    # Chaining and verification: promptlab/audit/chain.py; SQL: promptlab/store/audit.py.

    @functools.cached_property
    def _audit(self) -> AuditLog:
        return AuditLog(self.store)

    def _audit_change(
        self, kind: str, actor: str, payload: Mapping[str, Any], *, run_id: str | None = None
    ) -> None:
        """Record a change event (kind like ``feedback.imported``) unless the audit is off.

        The one hook every change goes through: other modules call it after they change
        something (imports, exports), with the actor who did it.
        """
        if self.settings.audit:
            self._audit.record_change(kind, actor, payload, run_id=run_id)

    def _audit_saved(self, result: SaveResult, author: str | None = None) -> None:
        if result.created:
            v = result.version
            self._audit_change(
                "prompt_version.created",
                author or self.settings.author,
                {"prompt": v.prompt_name, "version_id": v.id, "ref": v.ref, "bump": result.bump},
            )

    def audit_verify(self) -> VerifyReport:
        """Check every chain of the audit trail; the report names the first bad event of each."""
        return self._audit.verify()

    def audit_events(
        self,
        *,
        run_id: str | None = None,
        experiment: str | None = None,
        version_id: str | None = None,
        model: str | None = None,
        status: str | None = None,
        error_kind: str | None = None,
        kind: str | None = None,
        trace_id: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        limit: int | None = 1_000,
    ) -> list[AuditEvent]:
        """Events matching every filter given, oldest first (at most `limit`)."""
        return self._audit.events(
            AuditFilter(
                run_id=run_id,
                experiment=experiment,
                version_id=version_id,
                model=model,
                status=status,
                error_kind=error_kind,
                kind=kind,
                trace_id=trace_id,
                since=since,
                until=until,
                limit=limit,
            )  # fmt: skip
        )

    def audit_trace(self, trace_or_key: str) -> AuditTrace:
        """One item's trace by its trace id (its idempotency key) or a prefix of at least
        8 hex digits of it: every event in order, with its assignment bucket if split."""
        wanted = trace_or_key.strip().lower()
        if len(wanted) < 8:
            raise NotFoundError(f"trace {trace_or_key!r}: give at least 8 hex digits of it")
        ids = self._audit.trace_ids(wanted, limit=3)
        if not ids:
            untraced = self._audit.untraced_item(wanted)
            if untraced is not None:
                key, run, status = untraced
                why = f"it is {status} and has not been answered yet"
                if status == "cancelled":
                    why = "it was cancelled before it was sent (see its run's run.cancelled event)"
                elif status not in ("pending", "in_flight"):
                    why = f"it is {status}, from a run made with the audit off"
                raise NotFoundError(f"item {key} of run {run} has no trace events: {why}")
            raise NotFoundError(f"no audit trace whose id starts with {trace_or_key!r}")
        if len(ids) > 1:
            raise NotFoundError(
                f"trace {trace_or_key!r} is ambiguous: {', '.join(ids)}; give more digits"
            )
        events = tuple(self._audit.trace(ids[0]))
        run_id = events[0].run_id if events else None
        bucket = self._audit.bucket_of(run_id, ids[0]) if run_id else None
        result = next((e for e in reversed(events) if e.kind == "result"), None)
        if result is None or not is_lean(result.payload):
            return AuditTrace(ids[0], run_id, events, bucket)
        # A lean result event: its stages are read back from the rows it describes.
        record = self._audit.item_record(ids[0])
        details, attempts, verified = trace_details(
            result.payload, result.at, record, self.settings.mask, self._redactor()
        )
        return AuditTrace(ids[0], run_id, events, bucket, details, attempts, verified)

    def export_audit(
        self,
        path: str | Path,
        *,
        run_id: str | None = None,
        where: AuditFilter | None = None,
        force: bool = False,
    ) -> int:
        """Write the events of a run (or those `where` selects, its limit aside) as JSON
        Lines in chain order, each with its seq and hashes so it can be checked again;
        return how many. Streamed a page at a time. The file appears whole or not at all
        (as `export_table`'s), an existing regular file is replaced only with `force`, and
        secret values are masked as in every export. Recorded as a ``table.exported`` event."""
        where = where or AuditFilter(run_id=run_id, limit=None)
        if where.run_id is not None:
            self._reads.run(where.run_id)  # an unknown run is an error, not an empty file
        target = check_target(path, force=force)
        rows = 0
        with staged_file(target, force=force) as staged, staged.open("wb") as handle:
            for line in self._audit_lines(self._audit.iter_events(where)):
                handle.write(line)
                rows += 1
        self._audit_change(
            "table.exported",
            self.settings.author,
            {"table": "audit_events", "run_id": where.run_id, "path": target.name,
             "rows": rows},
            run_id=where.run_id,
        )  # fmt: skip
        return rows

    def _audit_lines(self, events: Iterable[AuditEvent]) -> Iterator[bytes]:
        """Events as JSON Lines with every secret value masked (the stored payloads are
        redacted already; this is the second guard every export has). A line holds no
        newline (JSON escapes them), so masking line by line misses nothing."""
        secrets = self._export_secrets()
        for event in events:
            line = json.dumps(event_record(event), ensure_ascii=False) + "\n"
            for secret in secrets:
                line = line.replace(secret, "[redacted]")
            yield line.encode()

    # ---- the Audit page's reads (SQL: promptlab/store/audit_page.py) ----------------

    def audit_page_events(self, where: AuditFilter, newest_first: bool = False) -> list[AuditEvent]:
        """Events `where` selects (at most its limit), oldest or newest first."""
        return AuditPageReads(self.store).events(where, newest_first)

    def audit_count(self, where: AuditFilter | None = None) -> int:
        """How many events `where` selects (every event without it), its limit aside."""
        return AuditPageReads(self.store).count(where or AuditFilter(limit=None))

    def audit_facets(self) -> dict[str, list[str]]:
        """The values item events hold in version_id, model, status and error_kind."""
        return AuditPageReads(self.store).facets()

    def audit_export_bytes(self, where: AuditFilter) -> bytes:
        """Every event `where` selects (its limit aside) as the JSON Lines `export_audit`
        writes, for the app's download; recorded as a ``table.exported`` change event.

        A download is held in memory whole (in the app's server), so more than
        MAX_DOWNLOAD_EVENTS events is refused: `promptlab audit export` streams any number.
        """
        count = self.audit_count(where)
        if count > MAX_DOWNLOAD_EVENTS:
            raise ExportError(
                f"{count:,} audit events are more than a download holds "
                f"({MAX_DOWNLOAD_EVENTS:,}): narrow the filters, or write them with "
                "`promptlab audit export --run RUN_ID -o FILE`"
            )
        lines = list(self._audit_lines(self._audit.iter_events(where)))
        self._audit_change(
            "table.exported",
            self.settings.author,
            {"table": "audit_events", "run_id": where.run_id, "path": "download",
             "rows": len(lines)},
            run_id=where.run_id,
        )  # fmt: skip
        return b"".join(lines)


#: Exposures checked and inserted at a time (all in one transaction).
EXPOSURE_BATCH = 50_000
#: Audit events one app download may hold (~1.3 KB each, built in the server's memory).
MAX_DOWNLOAD_EVENTS = 100_000


def _stored_config(row: StoredRevision) -> ExperimentConfig:
    return config_from_mapping(row.config, source=f"experiment {row.name} revision {row.revision}")


__all__ = [
    "ROLES",
    # the Compare page
    "RATE_METRICS",
    "RunWithResults",
    "SideBySidePage",
    "SideBySideRow",
    "TimeSeries",
    "VERDICT_ICONS",
    "forest_chart",
    "latency_ecdf_chart",
    "latency_percentiles_chart",
    "over_time_chart",
    "rate_chart",
    "srm_figures",
    "summary_rows",
    "units_needed",
    "units_needed_text",
    "word_diff_html",
    "AuditEvent",
    "AuditFilter",
    "AuditTrace",
    "VerifyReport",
    # the Audit page
    "MAX_DOWNLOAD_EVENTS",
    "ChainSummary",
    "TimelineBar",
    "TraceStage",
    "chain_summary",
    "event_rows",
    "stage_rows",
    "timeline_bars",
    "trace_stages",
    "trace_timeline_chart",
    "RunEstimate",
    "VariantEstimate",
    "Assignment",
    "AssignmentCount",
    "Comparison",
    "LogMetricsRow",
    "MetricComparison",
    "MetricsRow",
    "SrmCheck",
    "Verdict",
    "sample_size_two_proportions",
    "ExperimentConfig",
    "ExperimentError",
    "ExperimentVariant",
    "ExportError",
    "assign",
    "bucket_of",
    "describe_changes",
    "exposure_line",
    "load_experiment_config",
    "ConfigError",
    "DatabaseLockedError",
    "DatasetError",
    "DatasetInfo",
    "FeedbackError",
    "LOG_FIELDS",
    "CheckStatus",
    "FailureExample",
    "FieldFailure",
    "ItemCounts",
    "ItemKeyError",
    "ItemPage",
    "ItemRow",
    "ItemStatus",
    "ItemView",
    "NotFoundError",
    "PromptExistsError",
    "PromptFile",
    "PromptVersion",
    "PromptlabError",
    "RegistryError",
    "RowCheck",
    "RowProblem",
    "RunProgress",
    "RunRecord",
    "RunSpec",
    "RunStatus",
    "RunSummary",
    "RunView",
    "RunWithCounts",
    "SaveResult",
    "SpecError",
    "StoreError",
    "Template",
    "TemplateError",
    "VariableError",
    "VariableProblem",
    "VariantSummary",
    "Workbench",
    "coerce_text_values",
    "dump_yaml_mapping",
    "load_prompt_file",
    "load_spec",
    "parse_yaml_mapping",
]
