"""`wb.runs`: run specs, the run lifecycle (through the one shared engine) and run reads.

Specs come from pasted text, files, an experiment on a dataset, or a request file
(`promptlab batch`). Starting, resuming, cancelling and waiting go to the engine, which
starts on first use; reading a run (its view, its items, one item) needs none.
"""

from __future__ import annotations

import builtins  # `list` below names a method: annotations say builtins.list
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from promptlab.config import PROJECT_ROOT
from promptlab.conversations.replay import turn_of
from promptlab.data import batch_output
from promptlab.data.batchfile import first_model
from promptlab.engine import RunProgress, RunSpec, parse_spec
from promptlab.engine.plan.estimate import RunEstimate
from promptlab.engine.plan.judge_checks import check_judges
from promptlab.engine.plan.planner import KEY_HEX_DIGITS
from promptlab.engine.record.trace import SHARD
from promptlab.engine.spec.endpoints import confine_endpoint
from promptlab.engine.spec.runspec import LOCAL_ENDPOINTS
from promptlab.errors import ExperimentError, NotFoundError, SpecError
from promptlab.experiments import config_from_mapping
from promptlab.facades.context import Context
from promptlab.facades.datasets import Datasets
from promptlab.facades.experiments import Experiments
from promptlab.facades.run_view import FAILURES_SHOWN, RunView, read_run_view
from promptlab.providers.batches.ledger import ChunkView
from promptlab.providers.config import load_endpoints
from promptlab.records import FieldFailure, ItemDetail, RunWithCounts
from promptlab.records.sessions import SessionTurn, ShardRecord
from promptlab.store.afterrun import AfterRunStore
from promptlab.store.alerts import AlertStore
from promptlab.store.audit import AuditLog
from promptlab.store.items import ItemStore
from promptlab.store.provider_batches import BatchLedgerStore
from promptlab.store.sessions import SessionReads
from promptlab.store.shards import ShardStore
from promptlab.views.item import (
    ItemRequest,
    ItemView,
    ambiguous,
    check_key_prefix,
    item_request,
    masked,
)
from promptlab.yamlio import parse_yaml, read_yaml

__all__ = ["RunEstimate", "RunProgress", "RunSpec", "RunView", "Runs"]

#: The endpoint a `promptlab batch --base-url URL` run adds when it names none.
BATCH_ENDPOINT = "batch"


class Runs:
    """Make specs, start and follow runs, and read what they did."""

    def __init__(self, context: Context, experiments: Experiments, datasets: Datasets) -> None:
        self._context = context
        self._reads = context.reads
        self._experiments = experiments
        self._datasets = datasets
        #: A page of a run's items in plan order: `items(run_id, status=, variant=,
        #: error_kind=, search=, check=, offset=, limit=)`, see `ReadModels.items`.
        self.items = context.reads.items

    # ---- specs ---------------------------------------------------------------------

    def parse_spec(self, text: str) -> RunSpec:
        """A spec typed into the app: paths from the project folder, data folder only."""
        data = parse_yaml(text, where="run spec", error=SpecError)
        return parse_spec(
            self._with_experiment(data),
            base_dir=PROJECT_ROOT,
            dataset_root=self._context.settings.data_dir,
        )

    def load_spec(self, path: Path) -> RunSpec:
        """A spec file; relative paths are relative to it (see `_with_experiment`)."""
        data = read_yaml(path, error=SpecError)
        return self.spec_from_data(data, base_dir=path.parent, default_name=path.stem)

    def spec_from_data(
        self,
        data: Any,
        *,
        base_dir: Path | None = None,
        default_name: str = "run",
        dataset_root: Path | None = None,
    ) -> RunSpec:
        """A spec given as data (a file read elsewhere, an API request), checked whole."""
        return parse_spec(
            self._with_experiment(data),
            base_dir=base_dir,
            default_name=default_name,
            dataset_root=dataset_root,
        )

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
                config = self._experiments.get(name, int(revision) if revision else None)
            except ExperimentError as exc:
                raise SpecError(f"experiment: {exc}") from exc
            return {**data, "experiment": config.to_dict()}
        if not isinstance(given, Mapping):
            return data  # parse_spec names the problem
        try:
            config = config_from_mapping(given, source="experiment")
            stored = self._experiments.get(config.name, config.revision)
        except ExperimentError as exc:
            raise SpecError(f"experiment: {exc}") from exc
        if (stored.content(), stored.allocation) != (config.content(), config.allocation):
            raise SpecError(
                f"experiment: the config given is not revision {config.revision} of "
                f"{config.name} as stored; name it instead "
                f"(experiment: {config.name}@{config.revision})"
            )
        return {**data, "experiment": stored.to_dict()}

    def experiment_spec(
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
        executor: str | None = None,
    ) -> RunSpec:
        """A run of the experiment's latest revision on an imported dataset (its calls
        made where `executor` says, when it says).

        A split run's unit column is the one given, else the experiment's, else the
        dataset's own (set when it was imported).
        """
        config = self._experiments.get(name)
        data: dict[str, Any] = {
            "name": run_name or f"{name} r{config.revision} on {dataset}",
            "dataset": {"name": dataset},
            "experiment": config.to_dict(),
            "repeats": repeats,
        }
        if mode is not None:
            data["mode"] = mode
        if (mode or config.mode) == "split":
            unit = unit_column or config.unit_column or self._datasets.get(dataset).unit_column
            if unit:
                data["unit_column"] = unit
        if limit_rows is not None:
            data["limit_rows"] = limit_rows
        if skip_invalid_rows:
            data["skip_invalid_rows"] = True
        if executor is not None:
            data["executor"] = executor
        return parse_spec(data, base_dir=PROJECT_ROOT, dataset_root=self._context.settings.data_dir)

    def batch_spec(
        self,
        requests: Path,
        endpoint: str | None,
        model: str | None,
        id_field: str = "custom_id",
        settings: Mapping[str, Any] | None = None,
        *,
        confined: bool = False,
    ) -> RunSpec:
        """A run that sends every line of a request file as written (promptlab batch).

        `settings` (base_url, api_key_env, rpm, tpm, concurrency, as in the providers
        file) add the endpoint, or change a configured one, for this run; they are
        stored with it (never a key). `confined` (through a server): only as the
        providers file pairs URL and key variable, or new, keyless and on loopback."""
        settings = {k: v for k, v in (settings or {}).items() if v is not None}
        if endpoint is None:
            if "base_url" not in settings:
                raise SpecError("give --endpoint NAME (providers file or built-in) or --base-url")
            endpoint = BATCH_ENDPOINT
        model = model or first_model(requests)
        if not model:
            raise SpecError(f"{requests}: no line names a model: give --model")
        variant = {
            "name": "requests",
            "requests": "as_written",
            "id_field": id_field,
            "model": f"{endpoint}:{model}",
        }
        data: dict[str, Any] = {
            "name": f"batch {requests.name}",
            "dataset": str(requests.resolve()),
        }
        if settings:
            endpoints = load_endpoints(self._context.settings.providers_file)
            if confined:
                confine_endpoint(endpoint, settings, endpoints)
            configured = endpoint in endpoints
            kind = {} if configured or "kind" in settings else {"kind": "openai"}
            data[LOCAL_ENDPOINTS] = {endpoint: {**kind, **settings}}
        return parse_spec({**data, "variants": [variant]}, trusted=True)

    # ---- the lifecycle (the shared engine) -----------------------------------------

    def estimate(self, spec: RunSpec) -> RunEstimate:
        """Requests, tokens, cost and time the run would take, before it starts; for a
        split, the units each variant gets by the experiment's hashing, and warnings
        when a variant gets too few (`MIN_UNITS_PER_ARM`) or a lumpy share."""
        self._check_judges(spec)
        return self._context.engine().estimate(spec)

    def start(self, spec: RunSpec) -> str:
        self._check_judges(spec)
        return self._context.engine().submit(spec)

    def _check_judges(self, spec: RunSpec) -> None:
        """A judge's rubric must exist now, and its run be one a submit takes (endpoint,
        limits): it starts only when this one ends. So must drift's and a tiebreak's embedder."""
        judges = [(i, scorer) for i, scorer in enumerate(spec.scorers) if scorer.kind == "judge"]
        for i, scorer in judges:
            try:
                self._context.registry.resolve(str(scorer.options["prompt"]))
            except NotFoundError as exc:
                raise SpecError(f"scorers[{i}].prompt: {exc}") from exc
        if judges:
            endpoints = load_endpoints(self._context.settings.providers_file)
            check_judges(spec, endpoints, self._context.registry)
        tiebreak = spec.crosscheck.tiebreak if spec.crosscheck is not None else None
        if spec.drift is not None or tiebreak is not None:  # embedders there when needed
            from promptlab.evaluation.drift import check_setup

            endpoints = load_endpoints(self._context.settings.providers_file)
            if spec.drift is not None:
                check_setup(spec.drift.model, spec.drift.reference, endpoints, self._context.store)
            if tiebreak is not None:
                tiebreak.check_embedder(endpoints)

    def resume(self, run_id: str) -> str:
        return self._context.engine().resume(run_id)

    def cancel(self, run_id: str) -> None:
        self._context.engine().cancel(run_id)

    def pause(self, run_id: str) -> None:
        """Stop a running run's dispatch; `resume` continues it (engine.pause)."""
        self._context.engine().pause(run_id)

    def wait(self, run_id: str, timeout: float | None = None) -> RunProgress:
        return self._context.engine().wait(run_id, timeout)

    def is_active(self, run_id: str) -> bool:
        engine = self._context.started_engine()
        return engine is not None and engine.is_active(run_id)

    def progress(self, run_id: str) -> RunProgress:
        """Live counts of an active run (stored ones otherwise), for progress bars."""
        return self._context.engine().status(run_id)

    def batches(self, run_id: str) -> builtins.list[ChunkView]:
        """The run's provider batches (`executor: provider-batch`), oldest first."""
        return list(BatchLedgerStore(self._context.store).for_run(run_id))

    # ---- reads ---------------------------------------------------------------------

    def view(self, run_id: str, failures: int = FAILURES_SHOWN) -> RunView:
        """Everything shown about one run, from one snapshot of the store."""
        store, engine = self._context.store, self._context.started_engine()
        view = read_run_view(self._reads, AlertStore(store), engine, run_id, failures)
        return replace(view, after_run=tuple(AfterRunStore(store).for_run(run_id)))

    def field_failures(self, run_id: str, limit: int = 20) -> builtins.list[FieldFailure]:
        """The output paths that fail their check most in a run, per variant."""
        with self._reads.snapshot() as reads:
            reads.run(run_id)  # an unknown run is an error, not an empty list
            return reads.field_failures(run_id, limit)

    def item(self, run_id: str, key: str) -> ItemView:
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
            generated = reads.run(run_id).spec.get("history") == "generated"
        # Rendered from the row as stored (a generated-history turn with the answers its
        # session's earlier turns stored), then masked for display like everything shown.
        answers = self._earlier_answers(detail) if generated else None
        try:
            shard = self._shard(detail)
        except NotFoundError as exc:  # shown in place of the request
            request = ItemRequest(None, {}, str(exc))
        else:
            request = item_request(detail.variant, detail.row, answers, shard)
        return masked(detail, request, self._context.redactor())

    def _shard(self, detail: ItemDetail) -> Mapping[str, Any] | None:
        """The context shard a replayed turn was sent with, as its trace recorded it (or,
        with the audit off, as stored while the shard lives); None: it fit whole."""
        shard_id = detail.result.shard_id if detail.result is not None else None
        if shard_id is None:
            return None
        for event in reversed(AuditLog(self._context.store).trace(detail.key)):
            shard = event.payload.get(SHARD) if event.kind == "result" else None
            if isinstance(shard, Mapping) and shard.get("id") == shard_id:
                return shard
        stored = ShardStore(self._context.store).get(shard_id, self._context.store.clock.now())
        if stored is None:
            raise NotFoundError(
                f"item {detail.key}: its context shard {shard_id} has expired and the audit "
                "was off, so the request it was sent cannot be shown"
            )
        return {"first_message": stored.first_message, "summary": stored.summary}

    def _earlier_answers(self, detail: ItemDetail) -> builtins.list[str] | None:
        """The answers a generated-history turn was sent with; None while one is missing."""
        turn = turn_of(detail.row)
        first = detail.row_index - turn
        stored = ItemStore(self._context.store).turn_answers(
            detail.run_id, detail.variant.index, detail.repeat, first, turn
        )
        answers = [stored.get(first + t) for t in range(turn)]
        return None if None in answers else [a for a in answers if a is not None]

    def shards(self, run_id: str, session: str | None = None) -> builtins.list[ShardRecord]:
        """A replay's live context shards (of one session), by session, variant, repeat
        and seq_no; empty for a run whose histories all fit (or whose shards expired)."""
        self._reads.run(run_id)  # an unknown run says so
        store = self._context.store
        return ShardStore(store).of_run(run_id, store.clock.now(), session)

    def session(self, run_id: str, key: str) -> builtins.list[SessionTurn]:
        """The replayed session item `key` is a turn of: its finished turns of the same
        variant and repeat, in order, masked; empty for an item of any other run."""
        reads = SessionReads(self._context.store)
        found = reads.of_item(run_id, key)
        if found is None:
            return []
        dataset = self._reads.run(run_id).spec.get("dataset")
        name = dataset.get("name") if isinstance(dataset, Mapping) else None
        try:
            conversation = self._datasets.get(str(name)).conversation
        except NotFoundError:  # the log was deleted since: the turns show without it
            conversation = None
        content = conversation.content if conversation else None
        redactor = self._context.redactor()
        return [
            replace(
                t,
                user=redactor.optional(t.user),
                output=redactor.optional(t.output),
                error=redactor.optional(t.error),
            )
            for t in reads.turns(run_id, *found, content)
        ]

    def _batch_id_field(self, run_id: str) -> str | None:
        """The id field of a run over a request file (`promptlab batch`), else None."""
        return batch_output.id_field(self._reads.run(run_id).spec)

    def is_batch(self, run_id: str) -> bool:
        """Whether the run sends a request file as written."""
        return self._batch_id_field(run_id) is not None

    def write_batch_output(self, run_id: str, path: Path) -> int:
        """The run's results in the OpenAI Batch output format; returns the line count."""
        id_field = self._batch_id_field(run_id)
        if id_field is None:
            raise SpecError(f"run {run_id} does not run a request file")
        return batch_output.write(path, self._reads.results_with_rows(run_id), id_field)

    def list(self, limit: int = 50, include: str | None = None) -> builtins.list[RunWithCounts]:
        """The newest runs with their items per state, in one query; `include` names a run
        listed too however old (a link to it)."""
        return self._reads.list_runs_with_counts(limit, include)
