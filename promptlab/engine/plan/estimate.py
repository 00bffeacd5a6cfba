"""What a run will cost before it starts: requests, units, tokens, dollars and time. Pure.

Requests come from the first rows of the plan, assigned the way the run will assign
them (`sample_plan`): a split sends each row to the variant the experiment's hashing
gives its unit, so the estimate shows the split the run will really give, in units and
in requests, and warns when a variant gets fewer than MIN_UNITS_PER_ARM units or a share
far from its weight (17 units cannot give 70/30). Prompt tokens are counted on each
variant's own sample rows. Output tokens and latency come from earlier results of the
same version and model when there are some (`OutputHistory`); on a `sim` endpoint, from
the simulator run on the sample rows (it is deterministic: the run gets the same
answers); otherwise from `max_tokens` (an upper bound) and a guessed latency. Time is
the slowest endpoint's: each endpoint is bounded by its requests per minute, its tokens
per minute, and its concurrency times the latency; endpoints run side by side. Each limit
is the tighter of the providers file's and the spec's own `limits:` (which cap only that
run), and a rate lets its burst go at once, as the limiter does.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from promptlab.analysis.stats import MIN_UNITS_PER_ARM
from promptlab.conversations.replay import with_conversation
from promptlab.data.batchfile import request_from_row
from promptlab.engine.plan.planner import AllVariants, AssignmentStrategy, RecordsAssignments
from promptlab.engine.send.limiter import Limits
from promptlab.engine.send.requests import row_params
from promptlab.engine.spec.runspec import AS_WRITTEN
from promptlab.errors import PromptlabError
from promptlab.prompts.templates import Template, coerce_text_values
from promptlab.providers.base import CompletionRequest
from promptlab.providers.config import EndpointConfig, cost_usd, price_for
from promptlab.providers.simulator import SIM_MODELS, simulate
from promptlab.providers.tokens import estimate_prompt_tokens
from promptlab.records import OutputHistory, VariantRecord

#: Latency assumed for a model with no history and no simulator profile.
GUESSED_LATENCY_MS = 1_500.0
#: Concurrency assumed for an endpoint that configures none (the limiter's default).
DEFAULT_CONCURRENCY = 16
DEFAULT_MAX_TOKENS = 256
#: Rows an estimate reads and assigns to count requests and units per variant (scaled
#: to the whole dataset when it has more).
ESTIMATE_ROWS = 20_000
#: Rows per variant rendered (and, on a sim endpoint, simulated) to average its tokens.
TOKEN_SAMPLE_ROWS = 50
#: How far (absolute, as a share of the whole) a variant's share of units or requests
#: may be from its weight before the estimate warns that the split is lumpy.
SHARE_TOLERANCE = 0.10


@dataclass
class PlanSample:
    """The first rows of a run's plan, assigned as the run will assign them."""

    #: Rows the run plans (the whole dataset, or its first `limit_rows`).
    planned: int
    repeats: int
    #: The unit column of a split; None for a run that sends every row to every variant.
    unit_column: str | None = None
    #: Each variant's share of units by its weight, ramp and kill switch included (a split).
    shares: Mapping[str, float] = field(default_factory=dict)
    #: Rows read (at most ESTIMATE_ROWS; TOKEN_SAMPLE_ROWS when every row goes to every
    #: variant), and per variant: its rows, its distinct units, its sample rows.
    read: int = 0
    rows: Counter[str] = field(default_factory=Counter)
    units: dict[str, set[str]] = field(default_factory=dict)
    samples: dict[str, list[Mapping[str, Any]]] = field(default_factory=dict)
    #: Units outside the ramp (or all of them, killed): sent to control, not compared.
    outside: set[str] = field(default_factory=set)

    @property
    def complete(self) -> bool:
        """Whether every row the run plans was read (else counts are scaled up)."""
        return self.read >= self.planned

    def requests(self, name: str) -> int:
        """The variant's requests in the whole run: its rows, scaled, times the repeats."""
        scale = self.planned / self.read if self.read else 0.0
        return round(self.rows[name] * scale) * self.repeats


def sample_plan(
    rows: Iterable[Mapping[str, Any]],
    names: Sequence[str],
    strategy: AssignmentStrategy,
    sample: PlanSample,
) -> PlanSample:
    """Assign the first ESTIMATE_ROWS of `rows` with the run's own `strategy`, into `sample`.

    A split's strategy hashes each row's unit exactly as the run will, so the rows and
    units per variant are those the run gives, not the weights' expectation.
    """
    recorded = strategy if isinstance(strategy, RecordsAssignments) else None
    # Every row to every variant: the first rows sample the tokens, the count is exact.
    limit = TOKEN_SAMPLE_ROWS if isinstance(strategy, AllVariants) else ESTIMATE_ROWS
    for row_index, row in enumerate(itertools.islice(rows, limit)):
        sample.read += 1
        for index in strategy.variants_for(row_index, row):
            name = names[index]
            sample.rows[name] += 1
            kept = sample.samples.setdefault(name, [])
            if len(kept) < TOKEN_SAMPLE_ROWS:
                kept.append(row)
        for decided in recorded.drain_assignments() if recorded is not None else ():
            sample.units.setdefault(decided.variant, set()).add(decided.unit_id)
            if not decided.in_experiment:
                sample.outside.add(decided.unit_id)
    return sample


@dataclass(frozen=True)
class VariantEstimate:
    name: str
    endpoint: str
    model: str
    requests: int
    input_tokens: int
    output_tokens: int
    #: Where the output and latency figures come from: history, simulator or max_tokens.
    basis: str
    latency_ms: float
    cost_usd: float | None
    #: Distinct units (a split) the variant gets; None when every row goes to every variant.
    units: int | None = None
    #: Its share of units by its weight (ramp and kill switch included); None likewise.
    expected_share: float | None = None


@dataclass(frozen=True)
class UnitSplit:
    """How a split's units fall on its variants (per variant: `VariantEstimate.units`)."""

    column: str
    #: Distinct units in the rows read (all the run plans when `complete`).
    units: int
    #: Units outside the ramp or of a killed experiment: they get control, uncompared.
    outside: int
    #: False when only the first ESTIMATE_ROWS rows were read: unit counts are lower bounds.
    complete: bool


@dataclass(frozen=True)
class RunEstimate:
    requests: int
    input_tokens: int
    output_tokens: int
    #: None when some model has no price in the providers file.
    cost_usd: float | None
    seconds: float
    #: What bounds the time: e.g. "sim: concurrency 64 x 0.9 s latency".
    bound: str
    variants: tuple[VariantEstimate, ...]
    #: A split's units; None for a run that sends every row to every variant.
    units: UnitSplit | None = None
    #: What the user should know before starting: too few units, a lumpy split.
    warnings: tuple[str, ...] = ()


def estimate_run(
    variants: Sequence[VariantRecord],
    plan: PlanSample,
    endpoints: Mapping[str, EndpointConfig],
    history: Mapping[tuple[str, str], OutputHistory] | None = None,
    limits: Mapping[str, Limits] | None = None,
) -> RunEstimate:
    """The estimate of a run whose first rows were assigned into `plan` (module docstring);
    `limits` are the spec's own, per endpoint."""
    history, limits = history or {}, limits or {}
    estimates = [
        _variant(v, plan, endpoints[v.endpoint], history.get((v.prompt_version_id, v.model)))
        for v in variants
    ]
    seconds, bound = 0.0, "nothing to send"
    for name, cfg in endpoints.items():
        mine = [e for e in estimates if e.endpoint == name and e.requests]
        if not mine:
            continue
        endpoint_s, endpoint_bound = _endpoint_seconds(cfg, limits.get(name), mine)
        if endpoint_s >= seconds:
            seconds, bound = endpoint_s, endpoint_bound
    costs = [e.cost_usd for e in estimates if e.requests]
    units = _unit_split(plan)
    return RunEstimate(
        requests=sum(e.requests for e in estimates),
        input_tokens=sum(e.input_tokens for e in estimates),
        output_tokens=sum(e.output_tokens for e in estimates),
        cost_usd=None if any(c is None for c in costs) else sum(c or 0.0 for c in costs),
        seconds=seconds,
        bound=bound,
        variants=tuple(estimates),
        units=units,
        warnings=split_warnings(units, estimates) if units is not None else (),
    )


@dataclass(frozen=True)
class _PerRequest:
    """Mean prompt tokens, output tokens and latency of one request of a variant."""

    input_tokens: float
    output_tokens: float
    latency_ms: float


def _variant(
    variant: VariantRecord,
    plan: PlanSample,
    cfg: EndpointConfig,
    known: OutputHistory | None,
) -> VariantEstimate:
    requests = plan.requests(variant.name)
    samples = plan.samples.get(variant.name, [])
    sent = _requests(variant, samples)
    # Rows that do not render fail before they are sent: they cost nothing.
    sent_share = len(sent) / len(samples) if samples else 0.0
    prompt = _mean([estimate_prompt_tokens(r.messages) for r in sent])
    if known is not None and known.results:
        per = _PerRequest(prompt, known.output_tokens, known.latency_ms)
        basis = f"{known.results} results"
    elif cfg.kind == "sim" and variant.model in SIM_MODELS and sent:
        per = _simulated(sent, cfg)
        basis = f"simulator on {len(sent)} sample rows"
    else:
        max_tokens = _mean([r.max_tokens for r in sent]) if sent else _max_tokens(variant.params)
        per = _PerRequest(prompt, max_tokens, GUESSED_LATENCY_MS)
        basis = "max_tokens (at most)"
    input_tokens = round(per.input_tokens * requests * sent_share)
    output_tokens = round(per.output_tokens * requests * sent_share)
    cost = (
        cost_usd(cfg, variant.model, input_tokens, output_tokens)
        if price_for(cfg, variant.model) is not None
        else None
    )
    units = plan.units.get(variant.name, set()) if plan.unit_column is not None else None
    share = plan.shares.get(variant.name, 0.0) if plan.unit_column is not None else None
    return VariantEstimate(
        variant.name,
        variant.endpoint,
        variant.model,
        requests,
        input_tokens,
        output_tokens,
        basis,
        per.latency_ms,
        cost,
        None if units is None else len(units),
        share,
    )


def _requests(variant: VariantRecord, rows: Sequence[Mapping[str, Any]]) -> list[CompletionRequest]:
    """The requests the run would send for the sample rows, built as it builds them (a
    template rendered, or a request line as written); rows that fail are left out."""
    if variant.template.get(AS_WRITTEN):
        id_field = str(variant.template.get("id_field"))
        template = None
    else:
        template = Template.from_canonical(variant.template)
    requests = []
    for row in rows:
        try:
            if template is None:
                line = request_from_row(row, id_field)
                messages, params = line.messages, line.params
            else:
                params = row_params(variant.params, row)
                rendered = template.render(coerce_text_values(template, dict(row)))
                messages = tuple(with_conversation(rendered, dict(row)))
        except PromptlabError:
            continue  # such a row fails before it is sent: it costs nothing
        requests.append(
            CompletionRequest(
                model=variant.model,
                messages=messages,
                max_tokens=_max_tokens(params),
                temperature=params.get("temperature"),
                top_p=params.get("top_p"),
                seed=params.get("seed") if template is None else None,
                output_schema=template.output_schema if template is not None else None,
            )
        )
    return requests


def _max_tokens(params: Mapping[str, Any]) -> int:
    return int(params.get("max_tokens") or DEFAULT_MAX_TOKENS)


def _simulated(requests: Sequence[CompletionRequest], cfg: EndpointConfig) -> _PerRequest:
    """What the simulator answers to these requests, on average. It is deterministic
    (seeded by the request), so these are the answers the run will get: output tokens of
    JSON shaped by the schema, or text cut at `max_tokens`, and not a model's median."""
    outputs = [simulate(r, r.model) for r in requests]
    return _PerRequest(
        _mean([o.input_tokens for o in outputs]),
        _mean([o.output_tokens for o in outputs]),
        _mean([o.latency_ms for o in outputs]) * cfg.latency_scale,
    )


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _unit_split(plan: PlanSample) -> UnitSplit | None:
    if plan.unit_column is None:
        return None
    units = set().union(*plan.units.values()) if plan.units else set()
    return UnitSplit(plan.unit_column, len(units), len(plan.outside), plan.complete)


def split_warnings(units: UnitSplit, variants: Sequence[VariantEstimate]) -> tuple[str, ...]:
    """Too few units for a variant, or realized shares far from the weights (a lumpy split)."""
    compared = [v for v in variants if v.expected_share]
    if len(compared) < 2:
        return ()  # killed, or one variant owns every bucket: nothing is compared
    weights = _shares_text([v.expected_share or 0.0 for v in compared])
    counted = "" if units.complete else f" in the first {ESTIMATE_ROWS:,} rows"
    warnings = []
    few = [v for v in compared if (v.units or 0) < MIN_UNITS_PER_ARM]
    if few:
        needed = math.ceil(MIN_UNITS_PER_ARM / min(v.expected_share or 1.0 for v in compared))
        got = ", ".join(f"{v.name} gets {v.units}" for v in few)
        warnings.append(
            f"Too few units for a {weights} split: {got} of the {units.units} distinct "
            f"{units.column} values{counted}. A variant needs at least {MIN_UNITS_PER_ARM} "
            f"units to be compared (fewer show as too few units); {weights} needs about "
            f"{needed} units or more."
        )
    total_units = sum(v.units or 0 for v in compared)
    total_requests = sum(v.requests for v in compared)
    unit_shares = [(v.units or 0) / total_units if total_units else 0.0 for v in compared]
    request_shares = [v.requests / total_requests if total_requests else 0.0 for v in compared]
    weight_shares = _normalized([v.expected_share or 0.0 for v in compared])
    if any(
        abs(got - want) > SHARE_TOLERANCE
        for shares in (unit_shares, request_shares)
        for got, want in zip(shares, weight_shares, strict=True)
    ):
        warnings.append(
            f"The split will be {_shares_text(unit_shares)} of units and "
            f"{_shares_text(request_shares)} of requests "
            f"({'/'.join(f'{v.requests:,}' for v in compared)}), not {weights}: each "
            f"{units.column} gets one variant by its hash, so with few units, or units "
            "with many rows, the split is lumpy."
        )
    return tuple(warnings)


def _normalized(values: Sequence[float]) -> list[float]:
    total = sum(values)
    return [v / total if total else 0.0 for v in values]


def _shares_text(shares: Sequence[float]) -> str:
    """Shares as whole percents, e.g. 70/30."""
    return "/".join(f"{round(100 * s):d}" for s in _normalized(shares))


def _endpoint_seconds(
    cfg: EndpointConfig, capped: Limits | None, mine: Sequence[VariantEstimate]
) -> tuple[float, str]:
    requests = sum(e.requests for e in mine)
    tokens = sum(e.input_tokens + e.output_tokens for e in mine)
    latency_s = sum(e.latency_ms * e.requests for e in mine) / requests / 1000
    run = capped or Limits()
    concurrency = _tighter(cfg.concurrency, run.concurrency) or DEFAULT_CONCURRENCY
    burst_s = run.burst_s  # the run's, or the limiter's default
    bounds = [
        (
            requests * latency_s / concurrency,
            f"{cfg.name}: concurrency {concurrency}{_whose(cfg.concurrency, run.concurrency)} "
            f"x {latency_s:.2g} s latency",
        ),
    ]
    if rpm := _tighter(cfg.rpm, run.rpm):
        # The limiter lets a burst of rpm x burst_s / 60 go at once, then spaces the rest.
        rate_s = max(0.0, requests - rpm * burst_s / 60) / rpm * 60
        bounds.append((rate_s, f"{cfg.name}: {rpm:,} requests/min{_whose(cfg.rpm, run.rpm)}"))
    if tpm := _tighter(cfg.tpm, run.tpm):
        rate_s = max(0.0, tokens - tpm * burst_s / 60) / tpm * 60
        bounds.append((rate_s, f"{cfg.name}: {tpm:,} tokens/min{_whose(cfg.tpm, run.tpm)}"))
    return max(bounds)


def _tighter(endpoint: int | None, run: int | None) -> int | None:
    return min(v for v in (endpoint, run) if v) if endpoint or run else None


def _whose(endpoint: int | None, run: int | None) -> str:
    """Names the run's own cap when it is the one that binds."""
    return " (the spec's limits)" if run and (not endpoint or run < endpoint) else ""
