"""One prepare-run step: a spec becomes a `PreparedRun` that submit, estimate and resume share.

`prepare_run` makes every check a run needs before it exists, once and in one order: the
spec's endpoints merged into the configured ones and its `limits:` checked to name them,
its variants resolved into records (or, on resume, read back as recorded), its dataset
counted and the plan held to the item ceiling, then what only a run that sends needs:
every request line and every unit id readable. What comes out holds the endpoints, the
variant records, the dataset's rows and how to plan the run.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from promptlab.data.batchfile import ANTHROPIC_EXTRAS, BatchRequest
from promptlab.data.datasets import DatasetStore, check_rows
from promptlab.engine.plan.estimate import ESTIMATE_ROWS, PlanSample, sample_plan
from promptlab.engine.plan.planner import (
    AllVariants,
    AssignmentStrategy,
    SkipRows,
    StickySplit,
    plan_items,
)
from promptlab.engine.plan.rows import LineRefuser, RunRows
from promptlab.engine.send.limiter import Limits
from promptlab.engine.send.sharding import Replay
from promptlab.engine.send.summaries import SUMMARY_VARIABLES, SummaryPrompt
from promptlab.engine.spec.runspec import (
    AS_WRITTEN,
    PARAM_COLUMNS_KEY,
    VARIANT_PARAMS,
    RunSpec,
    VariantSpec,
)
from promptlab.errors import ConfigError, PromptlabError, SpecError, StoreError
from promptlab.experiments import assign, config_from_mapping, expected_shares
from promptlab.experiments.sampling import FIXED, SAMPLING_KEY, sampling_from_params
from promptlab.prompts.templates import Template
from promptlab.providers import modelrules
from promptlab.providers.batchconfig import batch_settings
from promptlab.providers.config import (
    EndpointConfig,
    parse_model_ref,
    sampling_rule,
    with_local_endpoints,
)
from promptlab.providers.kinds import endpoint_kinds
from promptlab.providers.simulator import SIM_MODELS
from promptlab.records import PlannedChunk, VariantRecord


class ResolvedVersion(Protocol):
    """What a run needs of a stored prompt version."""

    @property
    def id(self) -> str: ...

    @property
    def prompt_name(self) -> str: ...

    @property
    def semver(self) -> str: ...

    @property
    def template(self) -> Template: ...


class VersionResolver(Protocol):
    """Turns a reference like `name@production` into a version (the Registry is one)."""

    def resolve(self, ref: str) -> ResolvedVersion: ...


@dataclass(frozen=True)
class StoredRun:
    """A recorded run taken up again (resume): its variants as recorded, and whether its
    plan is complete (a complete plan is neither counted nor planned again)."""

    run_id: str
    variants: Sequence[VariantRecord]
    planned: bool


@dataclass(frozen=True)
class PreparedRun:
    """A checked spec, ready to record and run: endpoints, variant records, rows, plan."""

    spec: RunSpec
    #: The configured endpoints with the spec's inline ones merged in.
    endpoints: Mapping[str, EndpointConfig]
    variants: list[VariantRecord]
    rows: RunRows
    #: The dataset rows to plan the run from (counted now); None when it is planned already.
    plan_rows: int | None
    #: A replay's summary prompt for its context shards, resolved (engine/send/sharding.py).
    summary: SummaryPrompt | None = None

    @property
    def replay(self) -> Replay | None:
        """What a replay of a conversation log runs with; None for any other run."""
        history = self.spec.history
        return Replay(history, self.spec.shards, self.summary) if history is not None else None

    def plan(self, run_id: str, stop: Callable[[], bool] | None = None) -> Iterator[PlannedChunk]:
        """The run's items, chunk by chunk, from the rows counted when it was prepared.

        It reads the dataset (more than once with `skip_invalid_rows`): iterate it off the
        engine loop. A small JSON Lines file plans the rows it was counted with (kept:
        engine/plan/rows.py). Any other file rewritten since it was counted would plan other
        rows (none, half-written), and the run would "complete": that is refused
        (SpecError) once the last chunk is read, before the run is scheduled, so a resume
        plans it again. `stop` (asked as rows are read) ends it with PlanStopped.
        """
        strategy = self.strategy()
        names = [v.name for v in self.variants]
        read = 0
        chunks = plan_items(run_id, self.rows.read(), names, strategy, self.spec.repeats, stop=stop)
        for chunk in chunks:
            read += len(chunk.rows)
            yield chunk
        self.rows.release()
        if self.plan_rows is not None and read != self.plan_rows:
            spec = self.spec
            raise SpecError(
                f"dataset {spec.dataset or spec.dataset_name}: changed while the run was "
                f"being planned ({self.plan_rows} rows when it was submitted, {read} read "
                "to plan it); nothing was sent: resume the run to plan it again"
            )

    def strategy(self, rows: int | None = None, tiebreak: bool = False) -> AssignmentStrategy:
        """The run's assignment; with `skip_invalid_rows`, minus rows a template refuses.

        The check reads the dataset once more (up to `rows` rows) and renders each row
        with every variant's template, the way the run would. A tiebreak model gets rows
        later (engine/rounds.py); `tiebreak` plans it every row (an estimate's bound)."""
        strategy = _assignment(self.spec, [v.name for v in self.variants], tiebreak)
        if not self.spec.skip_invalid_rows:
            return strategy
        skipped: set[int] = set()
        for variant in self.variants:
            if variant.template.get(AS_WRITTEN):
                continue
            template = Template.from_canonical(variant.template)
            sample = (dict(row) for row in itertools.islice(self.rows.read(), rows))
            found = check_rows(sample, template, listed=0)
            skipped.update(number - 1 for number in found.bad_rows)
        return SkipRows(strategy, frozenset(skipped))

    def plan_sample(self) -> PlanSample:
        """The first ESTIMATE_ROWS rows assigned as the run will assign them, for an
        estimate: per variant its rows, its units (a split) and rows to sample tokens on.
        With `skip_invalid_rows`, the rows a template refuses get nothing, as in the run."""
        spec, used = self.spec, self.plan_rows or 0
        split = spec.split and spec.experiment is not None
        sample = PlanSample(
            planned=used,
            repeats=spec.repeats,
            unit_column=str(spec.unit_column) if split else None,
            shares=expected_shares(config_from_mapping(spec.experiment)) if split else {},
        )
        strategy = self.strategy(min(used, ESTIMATE_ROWS), tiebreak=True)
        rows = self.rows.read(with_history=True)  # a replay's turns as they are sent
        return sample_plan(rows, [v.name for v in self.variants], strategy, sample)


def prepare_run(
    spec: RunSpec,
    *,
    endpoints: Mapping[str, EndpointConfig],
    datasets: DatasetStore,
    max_items: int,
    registry: VersionResolver | None = None,
    stored: StoredRun | None = None,
    sending: bool = True,
) -> PreparedRun:
    """Check `spec` against the configured `endpoints`, the `registry` and the `datasets`,
    refusing (SpecError, ConfigError) what would fail the run later; see module docstring.

    A new run (`stored` None) resolves its variants through `registry`. A resumed one
    keeps those it recorded, and its dataset is counted again only when its plan never
    finished. With `sending` False (an estimate) the checks that read every row (request
    lines, unit ids) are left out: only the unit column is checked.
    """
    merged = merge_endpoints(with_local_endpoints(endpoints, spec.local_endpoints), spec.endpoints)
    if spec.executor is not None:  # the spec (or --distributed) says where calls are made
        merged = {name: replace(cfg, executor=spec.executor) for name, cfg in merged.items()}
    if stored is None:
        check_limits(spec.limits, merged)
        variants = resolve_variants(spec, merged, registry)
    else:
        variants = list(stored.variants)
        missing = sorted({v.endpoint for v in variants} - set(merged))
        if missing:
            raise ConfigError(f"run {stored.run_id} uses unknown endpoint(s): {', '.join(missing)}")
    spec, summary = summary_prompt(spec, registry)
    rows = RunRows(spec, datasets)
    # A resumed run whose plan never finished is counted again: its dataset may have
    # changed since, and the plan's ceiling holds again.
    plan_rows = rows.planned(max_items) if stored is None or not stored.planned else None
    if stored is None:
        if sending:
            rows.check_each(_line_refusers(variants, merged))
        elif spec.split:
            rows.check_unit_column()
        if spec.history is not None and spec.unit_column:  # a replay's user column
            rows.check_unit_column()
    return PreparedRun(spec, merged, variants, rows, plan_rows, summary)


def summary_prompt(
    spec: RunSpec, registry: VersionResolver | None
) -> tuple[RunSpec, SummaryPrompt | None]:
    """A replay's `shards: {summary: REF}` resolved, and the spec with that reference
    pinned to the version's id (a label moved later does not change a run's summaries;
    a resumed run resolves the same version)."""
    ref = spec.shards.summary
    if ref is None:
        return spec, None
    try:
        if registry is None:
            raise SpecError(f"a registry is needed to resolve {ref}")
        version = registry.resolve(ref)
    except PromptlabError as exc:
        if isinstance(exc, StoreError):
            raise
        raise SpecError(f"shards.summary: {exc}") from exc
    extra = sorted(set(version.template.variable_names) - SUMMARY_VARIABLES)
    if extra:
        raise SpecError(
            f"shards.summary: {ref} uses {', '.join(extra)}; a summary prompt is rendered with "
            f"{{{{ summary }}}} and {{{{ conversation }}}} only"
        )
    pinned = f"{version.prompt_name}@{version.id}"
    raw = {**spec.raw, "shards": {**(spec.raw.get("shards") or {}), "summary": pinned}}
    spec = replace(spec, raw=raw, shards=replace(spec.shards, summary=pinned))
    return spec, SummaryPrompt(version.id, pinned, version.template)


def _assignment(spec: RunSpec, names: list[str], tiebreak: bool) -> AssignmentStrategy:
    """Every row through every variant (a cross-check's tiebreak model only with
    `tiebreak`), or (a split) each unit's one variant."""
    if not spec.split or spec.experiment is None:
        doubted = spec.crosscheck is not None and spec.crosscheck.tiebreak is not None
        return AllVariants(len(names) - (doubted and not tiebreak))
    config = config_from_mapping(spec.experiment)

    def assigner(unit_id: str) -> tuple[str, int, bool]:
        decided = assign(config, unit_id)
        return decided.variant, decided.bucket, decided.in_experiment

    return StickySplit(config.name, config.revision, assigner, str(spec.unit_column), names)


# ---- endpoints and variants ------------------------------------------------------------


def merge_endpoints(
    base: Mapping[str, EndpointConfig], inline: Mapping[str, Mapping[str, Any]]
) -> dict[str, EndpointConfig]:
    """The configured endpoints with a spec's inline ones added or overriding fields.

    The security model (README, "Security"): a spec never changes a configured endpoint
    (its place, key or shared budget; `limits:` caps only the run itself) and never
    names a key; an endpoint it adds has no key and points at loopback. Keys reach only
    servers the providers file names.
    """
    out = dict(base)
    for name, values in inline.items():
        current = out.get(name)
        if current is not None:
            # Its place, key and shared budget belong to the providers file: a spec
            # pasted into a shared app must not redirect it or change everyone's budget.
            changed = sorted(
                field for field in values if values[field] != getattr(current, field, None)
            )
            if changed:
                raise SpecError(
                    f"endpoints.{name}: a run spec may not change {', '.join(changed)} of a "
                    "configured endpoint (cap this run with `limits:`, or use a new "
                    "endpoint name, or the providers file)"
                )
            continue
        kind = values.get("kind")
        known = kind in endpoint_kinds(load=False) or kind in endpoint_kinds()
        if not isinstance(kind, str) or not known:
            raise SpecError(f"endpoints.{name}: 'kind' is required for a new endpoint")
        if kind != "sim" and "base_url" not in values:
            raise SpecError(
                f"endpoints.{name}.base_url: required for a new endpoint, on loopback "
                "(e.g. http://127.0.0.1:8011/v1)"
            )
        fields = {k: v for k, v in values.items() if k != "kind"}
        if "batch" in fields:  # checked by the spec's parse (engine/spec/endpoints.py)
            fields["batch"] = batch_settings(fields["batch"], f"endpoints.{name}")
        out[name] = replace(EndpointConfig(name=name, kind=kind), **fields)
    return out


def check_limits(limits: Mapping[str, Limits], endpoints: Mapping[str, EndpointConfig]) -> None:
    """Every `limits:` entry must name an endpoint: a typo would otherwise be ignored."""
    unknown = sorted(set(limits) - set(endpoints))
    if unknown:
        known = ", ".join(sorted(endpoints))
        raise SpecError(f"limits.{unknown[0]}: no endpoint of that name (known: {known})")


def resolve_variants(
    spec: RunSpec, endpoints: Mapping[str, EndpointConfig], registry: VersionResolver | None
) -> list[VariantRecord]:
    """Turn each variant into a stored record: template content, version id, model, params."""
    records = []
    for index, variant in enumerate(spec.variants):
        records.append(_variant_record(index, variant, endpoints, registry))
    return records


def _variant_record(
    index: int,
    variant: VariantSpec,
    endpoints: Mapping[str, EndpointConfig],
    registry: VersionResolver | None,
) -> VariantRecord:
    """One variant's record; its template (none for requests sent as written) first, then
    its endpoint and model, which must be known."""
    where = f"variants[{index}] ({variant.name})"
    found = None if variant.as_written else _template(variant, registry, where)
    model_ref = variant.model or (found.model_ref if found is not None else "")
    endpoint, model = parse_model_ref(model_ref)
    if endpoint not in endpoints:
        known = ", ".join(sorted(endpoints))
        raise SpecError(f"{where}: unknown endpoint {endpoint!r} (known: {known})")
    if found is None:
        return VariantRecord(
            index=index,
            name=variant.name,
            prompt_ref=f"requests:{AS_WRITTEN}",
            prompt_version_id=f"requests:{AS_WRITTEN}",
            endpoint=endpoint,
            model=model,
            params={},
            template={AS_WRITTEN: True, "id_field": variant.id_field},
        )
    if endpoints[endpoint].kind == "sim" and model not in SIM_MODELS:
        raise SpecError(
            f"{where}: the simulator has no model {model!r} (models: {', '.join(SIM_MODELS)})"
        )
    params = _params(variant, found.template)
    refused = modelrules.refusal(
        sampling_rule(endpoints[endpoint], model), model_ref, params, _moving_params(params)
    )
    if refused is not None:
        raise SpecError(f"{where}: {refused}")
    return VariantRecord(
        index=index,
        name=variant.name,
        prompt_ref=found.ref,
        prompt_version_id=found.version_id,
        endpoint=endpoint,
        model=model,
        params=params,
        template=found.template.canonical(),
    )


def _line_refusers(
    variants: Sequence[VariantRecord], endpoints: Mapping[str, EndpointConfig]
) -> dict[int, LineRefuser]:
    """Per variant sending request lines as written: what its model refuses in a line."""
    refusers: dict[int, LineRefuser] = {}
    for v in variants:
        if v.template.get(AS_WRITTEN):
            endpoint = endpoints[v.endpoint]
            rule, ref = sampling_rule(endpoint, v.model), f"{v.endpoint}:{v.model}"
            anthropic = endpoint.kind == "anthropic"

            def refuse(
                line: BatchRequest, rule: str = rule, ref: str = ref, anthropic: bool = anthropic
            ) -> str | None:
                untaken = sorted(set(line.extra) - ANTHROPIC_EXTRAS) if anthropic else []
                if untaken:
                    return (
                        f"{ref} is an Anthropic endpoint: it cannot take {', '.join(untaken)} "
                        f"(of a chat body's fields it takes {', '.join(sorted(ANTHROPIC_EXTRAS))})"
                    )
                return modelrules.refusal(rule, ref, line.params, explicit=True)

            refusers[v.index] = refuse
    return refusers


def _moving_params(params: Mapping[str, Any]) -> dict[str, str]:
    """Params that move per row (`params_from` columns) or over the batch (a sampling
    schedule), each with where it comes from."""
    columns = params.get(PARAM_COLUMNS_KEY) or {}
    moving = {str(param): f"column {column}" for param, column in columns.items()}
    sampling = sampling_from_params(params)
    if sampling is not None and sampling.param is not None:
        moving[sampling.param] = f"a {sampling.strategy} schedule"
    return moving


@dataclass(frozen=True)
class _Found:
    """A variant's template and where it comes from: a registry version, or inline."""

    template: Template
    version_id: str
    ref: str

    @property
    def model_ref(self) -> str:
        return str(self.template.params.get("model"))


def _template(variant: VariantSpec, registry: VersionResolver | None, where: str) -> _Found:
    """The variant's template: its registry version resolved, or its inline messages built."""
    try:
        if variant.prompt is not None:
            if registry is None:
                raise SpecError(f"{where}: a registry is needed to resolve {variant.prompt}")
            version = registry.resolve(variant.prompt)
            return _Found(version.template, version.id, f"{version.prompt_name}@{version.semver}")
        template = Template.build(
            list(variant.messages or ()),
            output_schema=variant.output_schema,
            rules=variant.rules,
        )
        return _Found(template, template.content_hash(), f"inline:{variant.name}")
    except PromptlabError as exc:
        if isinstance(exc, SpecError | StoreError):  # a database failure is not the spec's
            raise
        raise SpecError(f"{where}: {exc}") from exc


def _params(variant: VariantSpec, template: Template) -> dict[str, Any]:
    """The template's request params, the variant's on top, and what moves per row."""
    params = {
        key: template.params.get(key) for key in sorted(VARIANT_PARAMS) if key in template.params
    }
    params.update(variant.params)
    if variant.params_from:
        params[PARAM_COLUMNS_KEY] = dict(variant.params_from)
    if variant.sampling and variant.sampling.get("strategy", FIXED) != FIXED:
        params[SAMPLING_KEY] = dict(variant.sampling)
    return params
