"""What a run will cost before it starts: requests, tokens, dollars and time. Pure.

Prompt tokens are counted on rendered sample rows. Output tokens and latency come from
earlier results of the same version and model when there are some (`OutputHistory`), from
the simulator's own profile on a `sim` endpoint, and otherwise from `max_tokens` (an
upper bound) and a guessed latency. Time is the slowest endpoint's: each endpoint is
bounded by its requests per minute, its tokens per minute, and its concurrency times
the latency; endpoints run side by side.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from promptlab.engine.run import row_params
from promptlab.errors import PromptlabError
from promptlab.prompts.templates import Template, coerce_text_values
from promptlab.providers.config import EndpointConfig, cost_usd, price_for
from promptlab.providers.simulator import SIM_MODELS
from promptlab.providers.tokens import estimate_prompt_tokens
from promptlab.records import OutputHistory, VariantRecord

#: Latency assumed for a model with no history and no simulator profile.
GUESSED_LATENCY_MS = 1_500.0
#: Concurrency assumed for an endpoint that configures none (the limiter's default).
DEFAULT_CONCURRENCY = 16
DEFAULT_MAX_TOKENS = 256


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


def estimate_run(
    variants: Sequence[VariantRecord],
    requests: Mapping[str, int],
    sample_rows: Sequence[Mapping[str, Any]],
    endpoints: Mapping[str, EndpointConfig],
    history: Mapping[tuple[str, str], OutputHistory] | None = None,
) -> RunEstimate:
    """The estimate for `requests[variant name]` items per variant (see module docstring)."""
    history = history or {}
    estimates = [
        _variant(v, requests.get(v.name, 0), sample_rows, endpoints[v.endpoint], history)
        for v in variants
    ]
    seconds, bound = 0.0, "nothing to send"
    for name, cfg in endpoints.items():
        mine = [e for e in estimates if e.endpoint == name and e.requests]
        if not mine:
            continue
        endpoint_s, endpoint_bound = _endpoint_seconds(cfg, mine)
        if endpoint_s >= seconds:
            seconds, bound = endpoint_s, endpoint_bound
    costs = [e.cost_usd for e in estimates if e.requests]
    return RunEstimate(
        requests=sum(e.requests for e in estimates),
        input_tokens=sum(e.input_tokens for e in estimates),
        output_tokens=sum(e.output_tokens for e in estimates),
        cost_usd=None if any(c is None for c in costs) else sum(c or 0.0 for c in costs),
        seconds=seconds,
        bound=bound,
        variants=tuple(estimates),
    )


def _variant(
    variant: VariantRecord,
    requests: int,
    rows: Sequence[Mapping[str, Any]],
    cfg: EndpointConfig,
    history: Mapping[tuple[str, str], OutputHistory],
) -> VariantEstimate:
    prompt_tokens = _mean_prompt_tokens(variant, rows)
    max_tokens = int(variant.params.get("max_tokens") or DEFAULT_MAX_TOKENS)
    known = history.get((variant.prompt_version_id, variant.model))
    sim = SIM_MODELS.get(variant.model) if cfg.kind == "sim" else None
    if known is not None and known.results:
        output, latency, basis = known.output_tokens, known.latency_ms, f"{known.results} results"
    elif sim is not None:
        output = min(float(sim.median_output_tokens), float(max_tokens))
        latency = (sim.median_latency_ms + output * sim.ms_per_output_token) * cfg.latency_scale
        basis = "simulator profile"
    else:
        output, latency, basis = float(max_tokens), GUESSED_LATENCY_MS, "max_tokens (at most)"
    input_tokens = round(prompt_tokens * requests)
    output_tokens = round(output * requests)
    cost = (
        cost_usd(cfg, variant.model, input_tokens, output_tokens)
        if price_for(cfg, variant.model) is not None
        else None
    )
    return VariantEstimate(
        variant.name, variant.endpoint, variant.model, requests, input_tokens, output_tokens,
        basis, latency, cost,
    )  # fmt: skip


def _mean_prompt_tokens(variant: VariantRecord, rows: Sequence[Mapping[str, Any]]) -> float:
    """Prompt tokens per request, averaged over the sample rows that render."""
    if not rows or not variant.template.get("messages"):
        return 0.0
    template = Template.from_canonical(variant.template)
    counts = []
    for row in rows:
        try:
            row_params(variant.params, row)
            messages = template.render(coerce_text_values(template, dict(row)))
        except PromptlabError:
            continue  # such a row fails before it is sent: it costs nothing
        counts.append(estimate_prompt_tokens(messages))
    return sum(counts) / len(counts) if counts else 0.0


def _endpoint_seconds(cfg: EndpointConfig, mine: Sequence[VariantEstimate]) -> tuple[float, str]:
    requests = sum(e.requests for e in mine)
    tokens = sum(e.input_tokens + e.output_tokens for e in mine)
    latency_s = sum(e.latency_ms * e.requests for e in mine) / requests / 1000
    concurrency = cfg.concurrency or DEFAULT_CONCURRENCY
    bounds = [
        (requests * latency_s / concurrency,
         f"{cfg.name}: concurrency {concurrency} x {latency_s:.2g} s latency"),
    ]  # fmt: skip
    if cfg.rpm:
        bounds.append((requests / cfg.rpm * 60, f"{cfg.name}: {cfg.rpm:,} requests/min"))
    if cfg.tpm:
        bounds.append((tokens / cfg.tpm * 60, f"{cfg.name}: {cfg.tpm:,} tokens/min"))
    return max(bounds)
