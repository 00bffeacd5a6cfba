"""The simulated model: deterministic text or JSON, latency, faults and user feedback.

Everything here is simulated: outputs say so in their model version, and the numbers
(latency, click-through) come from the small, documented formulas below, not from
any real model. The same seed and request always give the same output.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from promptlab.providers.base import CompletionRequest, FinishReason
from promptlab.providers.simdraws import (
    CANDIDATES,
    chosen_logprobs,
    model_positions,
    repeat_draws,
)
from promptlab.providers.simdraws import keyed_rng as _rng
from promptlab.providers.simlabels import read_label
from promptlab.providers.simschema import MAX_SCHEMA_DEPTH as MAX_SCHEMA_DEPTH
from promptlab.providers.simschema import break_schema, instance_for_schema, malform
from promptlab.providers.simtext import TOKENS_PER_WORD as TOKENS_PER_WORD
from promptlab.providers.simtext import plain_text, topics, truncate_to_tokens
from promptlab.providers.tokens import count_tokens, estimate_prompt_tokens

#: Appears in every simulated model version string, so no chart mistakes it for real.
SIMULATED_LABEL = "simulated"
SIM_VERSION = "v1"

FAULT_MALFORMED = "malformed"
FAULT_TRUNCATED = "truncated"
FAULT_SCHEMA = "schema_violation"


@dataclass(frozen=True)
class SimModel:
    """A named simulated model: how good, how long-winded and how slow it is."""

    name: str
    description: str
    quality: float
    median_latency_ms: float
    latency_sigma: float
    ms_per_output_token: float
    median_output_tokens: int
    length_sigma: float
    malformed_rate: float
    truncated_rate: float
    schema_break_rate: float
    base_ctr: float


SIM_MODELS: dict[str, SimModel] = {
    m.name: m
    for m in (
        SimModel(
            "careful",
            "high quality, slower, longer",
            0.9,
            900,
            0.35,
            12,
            160,
            0.3,
            0.01,
            0.01,
            0.01,
            0.22,
        ),
        SimModel(
            "balanced", "middle of the road", 0.7, 450, 0.4, 8, 90, 0.35, 0.04, 0.02, 0.03, 0.16
        ),
        SimModel("fast", "quick and terse", 0.55, 180, 0.3, 4, 35, 0.3, 0.05, 0.02, 0.05, 0.12),
        SimModel(
            "sloppy", "cheap, often breaks JSON", 0.35, 300, 0.6, 6, 70, 0.6, 0.20, 0.08, 0.12, 0.08
        ),
        SimModel(
            "pocket",
            "tiny 512-token window (shows context shards)",
            0.5,
            200,
            0.3,
            4,
            40,
            0.3,
            0.05,
            0.02,
            0.05,
            0.10,
        ),
    )
}
#: Used for names the simulator does not know (e.g. `gpt-4o-mini` sent to fakellm).
DEFAULT_SIM_MODEL = "balanced"

#: Prefill is far cheaper per token than generation.
MS_PER_INPUT_TOKEN = 0.02
#: Temperatures above this make outputs noisier (more faults, more length spread).
NEUTRAL_TEMPERATURE = 1.0
#: The spread (log scale) of a repeat's latency around its answer's: queueing at the
#: server, there at temperature 0 too.
QUEUE_JITTER = 0.15


@dataclass(frozen=True)
class FaultRates:
    """Overrides of a model's share of malformed, truncated and schema-breaking outputs."""

    malformed: float | None = None
    truncated: float | None = None
    schema_break: float | None = None


@dataclass(frozen=True)
class SimOutput:
    """One simulated completion."""

    text: str
    input_tokens: int
    output_tokens: int
    finish_reason: FinishReason
    latency_ms: float
    fault: str | None
    model_version: str


def resolve_model(name: str) -> SimModel:
    """The named simulated model, or the default profile under the given name."""
    for candidate in (name, name.removeprefix("sim:"), name.removeprefix("sim-")):
        if candidate in SIM_MODELS:
            return SIM_MODELS[candidate]
    base = SIM_MODELS[DEFAULT_SIM_MODEL]
    return SimModel(**{**base.__dict__, "name": name})


def model_version(model: SimModel) -> str:
    """The version string a simulated response reports, labelled as simulated."""
    return f"{model.name}-{SIMULATED_LABEL}-{SIM_VERSION}"


def _messages_key(messages: Iterable[Mapping[str, str]]) -> tuple[tuple[str, ...], ...]:
    return tuple(tuple(f"{k}={v}" for k, v in sorted(m.items())) for m in messages)


# --- prompt quality: what makes a prompt "better" in this simulation -----------------

#: Cue phrases and the quality each adds; a prompt with none of them scores low.
_QUALITY_CUES: tuple[tuple[tuple[str, ...], float], ...] = (
    (("json", "format", "bullet", "list", "concise", "words", "sentences"), 0.2),
    (("example", "e.g.", "for instance", "such as"), 0.15),
    (("you are", "as a", "audience", "customer", "reader"), 0.15),
    (("step by step", "check", "verify", "make sure"), 0.1),
)
SYSTEM_MESSAGE_BONUS = 0.2
WELL_SIZED_PROMPT_BONUS = 0.2
#: A user message shorter than this is too vague; longer than the max, too rambling.
WELL_SIZED_PROMPT_CHARS = (40, 4000)


def prompt_quality(messages: Iterable[Mapping[str, str]]) -> float:
    """A 0..1 score for how well a prompt is written, from simple documented cues."""
    msgs = list(messages)
    text = " ".join(str(m.get("content", "")) for m in msgs).lower()
    score = 0.0
    if any(m.get("role") == "system" for m in msgs):
        score += SYSTEM_MESSAGE_BONUS
    user_chars = sum(len(str(m.get("content", ""))) for m in msgs if m.get("role") == "user")
    low, high = WELL_SIZED_PROMPT_CHARS
    if low <= user_chars <= high:
        score += WELL_SIZED_PROMPT_BONUS
    for cues, bonus in _QUALITY_CUES:
        if any(cue in text for cue in cues):
            score += bonus
    return min(score, 1.0)


# --- the simulation --------------------------------------------------------------------


def simulate(
    request: CompletionRequest,
    model: str | SimModel,
    *,
    seed: int = 0,
    rates: FaultRates | None = None,
    prompt_tokens: int | None = None,
) -> SimOutput:
    """Simulate one completion, deterministically for this seed and request.

    `prompt_tokens` saves re-counting when the caller already estimated the prompt.
    """
    sim = model if isinstance(model, SimModel) else resolve_model(model)
    messages = _messages_key(request.messages)
    rng = _generator(request, sim, seed, messages)
    input_tokens = (
        estimate_prompt_tokens(request.messages) if prompt_tokens is None else prompt_tokens
    )
    quality = prompt_quality(request.messages)
    noise = 1.0 + max(0.0, (request.temperature or NEUTRAL_TEMPERATURE) - NEUTRAL_TEMPERATURE)
    # A well-written prompt halves the fault shares at best; a hot temperature raises them.
    fault_scale = noise * (1.0 - 0.5 * quality)
    target = max(
        1, int(sim.median_output_tokens * math.exp(sim.length_sigma * noise * rng.gauss(0, 1)))
    )
    words = topics(request.messages)
    fault: str | None = None
    finish = FinishReason.STOP
    if request.output_schema is not None:
        text, fault = _json_output(request, sim, rng, words, rates, fault_scale)
        if fault == FAULT_TRUNCATED:
            finish = FinishReason.LENGTH
    else:
        text = plain_text(rng, words, target, bullets=sim.quality >= 0.85)
    output_tokens = count_tokens(text)
    if output_tokens > request.max_tokens:
        text = truncate_to_tokens(text, request.max_tokens)
        output_tokens = count_tokens(text)
        finish = FinishReason.LENGTH
        if request.output_schema is not None:
            fault = FAULT_TRUNCATED
    return SimOutput(
        text=text,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        finish_reason=finish,
        latency_ms=round(_latency(request, sim, rng, messages, input_tokens, output_tokens), 3),
        fault=fault,
        model_version=model_version(sim),
    )


def _generator(
    request: CompletionRequest, sim: SimModel, seed: int, messages: tuple[tuple[str, ...], ...]
) -> random.Random:
    """The answer's generator: keyed by everything the request holds, or, for a repeat,
    the same answer at temperature 0 and re-drawn choices above it."""
    schema = json.dumps(request.output_schema, sort_keys=True)
    if request.sample is None:
        return _rng(
            seed,
            sim.name,
            request.seed,
            request.temperature,
            request.top_p,
            request.max_tokens,
            messages,
            schema,
        )
    return _draws(request, sim, seed, sim.name, request.seed, request.max_tokens, messages, schema)


def _latency(
    request: CompletionRequest,
    sim: SimModel,
    rng: random.Random,
    messages: tuple[tuple[str, ...], ...],
    input_tokens: int,
    output_tokens: int,
) -> float:
    """Milliseconds: the model's lognormal base, generation and prefill per token."""
    latency = (
        sim.median_latency_ms * math.exp(sim.latency_sigma * rng.gauss(0, 1))
        + sim.ms_per_output_token * output_tokens
        + MS_PER_INPUT_TOKEN * input_tokens
    )
    if request.sample is not None:  # a server's time varies call to call, whatever the T
        latency *= math.exp(QUEUE_JITTER * _rng("queue", messages, request.sample).gauss(0, 1))
    return latency


#: Output tokens a simulated answer carries log-probabilities for (the first ones).
LOGPROB_TOKENS = 64


def _draws(request: CompletionRequest, sim: SimModel, *key: object) -> random.Random:
    """A repeat's generator for the draws keyed by `key` (providers/simdraws.py)."""
    return repeat_draws(
        sim.name,
        sim.quality,
        _messages_key(request.messages),
        request.temperature,
        request.top_p,
        request.sample,
        *key,
    )


def chosen_logprob(
    request: CompletionRequest, model: str | SimModel, output_tokens: int
) -> tuple[float, int]:
    """(mean log-probability, tokens) of the answer's chosen tokens (the first
    LOGPROB_TOKENS), as sampled at the request's temperature and top_p."""
    sim = model if isinstance(model, SimModel) else resolve_model(model)
    messages = _messages_key(request.messages)
    count = min(max(1, output_tokens), LOGPROB_TOKENS)
    positions = model_positions(sim.name, sim.quality, messages, count, CANDIDATES)
    rng = _rng("chosen", sim.name, messages, request.temperature, request.top_p, request.sample)
    chosen = chosen_logprobs(positions, request.temperature, request.top_p, rng)
    return sum(chosen) / len(chosen), len(chosen)


def simulated_logprobs(
    request: CompletionRequest, model: str | SimModel, output_tokens: int, top: int
) -> list[list[float]]:
    """The `top` log-probabilities of each output token (the first LOGPROB_TOKENS): a
    good model's most likely token takes most of the mass, a poor model's less, so its
    entropy is higher. Deterministic per model and messages, like the answer."""
    sim = model if isinstance(model, SimModel) else resolve_model(model)
    count = max(1, min(output_tokens, LOGPROB_TOKENS))
    return model_positions(sim.name, sim.quality, _messages_key(request.messages), count, top)


# --- reading labels: when the model gets a label right (the cues: simlabels.py) ---------


def _reads(request: CompletionRequest, sim: SimModel, field: str) -> bool:
    """Whether the model reads `field` right this time: as often as its quality times
    0.6 to 1 by how well the prompt is written; its own draw, so nothing else the
    answer holds changes."""
    chance = sim.quality * (0.6 + 0.4 * prompt_quality(request.messages))
    key = ("read", sim.name, field, _messages_key(request.messages))
    return (_rng(*key) if request.sample is None else _draws(request, sim, *key)).random() < chance


def _read_labels(value: Any, request: CompletionRequest, sim: SimModel) -> Any:
    schema = request.output_schema or {}
    if not isinstance(value, dict):
        return value
    user = [str(m.get("content", "")) for m in request.messages if m.get("role") == "user"]
    for field, sub in (schema.get("properties") or {}).items():
        labels = sub.get("enum") if isinstance(sub, Mapping) else None
        if field not in value or not isinstance(labels, list) or not user:
            continue
        label = read_label(user[-1], [x for x in labels if isinstance(x, str)])
        if label is not None and _reads(request, sim, field):
            value[field] = label
    return value


def _json_output(
    request: CompletionRequest,
    sim: SimModel,
    rng: random.Random,
    words: list[str],
    rates: FaultRates | None,
    fault_scale: float,
) -> tuple[str, str | None]:
    schema = request.output_schema or {}
    value = _read_labels(instance_for_schema(schema, rng, words, schema), request, sim)
    rates = rates or FaultRates()
    malformed = _rate(rates.malformed, sim.malformed_rate, fault_scale)
    truncated = _rate(rates.truncated, sim.truncated_rate, fault_scale)
    broken = _rate(rates.schema_break, sim.schema_break_rate, fault_scale)
    draw = rng.random()
    if draw < malformed:
        return malform(json.dumps(value), rng), FAULT_MALFORMED
    if draw < malformed + truncated:
        text = json.dumps(value)
        return text[: max(1, int(len(text) * rng.uniform(0.3, 0.9)))], FAULT_TRUNCATED
    if draw < malformed + truncated + broken:
        return json.dumps(break_schema(value, schema, rng)), FAULT_SCHEMA
    return json.dumps(value), None


def _rate(override: float | None, default: float, scale: float) -> float:
    # An explicit override is taken as is, so tests and fakellm flags mean what they say.
    return override if override is not None else min(1.0, default * scale)


# --- simulated user feedback -------------------------------------------------------------

#: Outputs between these word counts read best; shorter or longer ones get fewer clicks.
IDEAL_WORDS = (25, 150)
#: A broken output (bad JSON, cut off) is clicked this much less often.
FAULT_CTR_FACTOR = 0.3
MAX_CTR = 0.95


def click_probability(
    model: str,
    output_text: str,
    *,
    prompt_messages: Iterable[Mapping[str, str]] | None = None,
    fault: str | None = None,
) -> float:
    """Simulated chance a user clicks this output: model, prompt quality, length, faults."""
    sim = resolve_model(model)
    quality = prompt_quality(prompt_messages) if prompt_messages is not None else 0.5
    words = len(output_text.split())
    low, high = IDEAL_WORDS
    if words < low:
        length_factor = 0.5 + 0.5 * words / low
    elif words > high:
        length_factor = max(0.4, high / words)
    else:
        length_factor = 1.0
    p = sim.base_ctr * (0.6 + 0.8 * quality) * length_factor
    if fault is not None:
        p *= FAULT_CTR_FACTOR
    return max(0.0, min(MAX_CTR, p))


def simulate_feedback(
    model: str,
    output_text: str,
    unit_id: str,
    *,
    seed: int = 0,
    prompt_messages: Iterable[Mapping[str, str]] | None = None,
    fault: str | None = None,
) -> bool:
    """Whether the simulated user `unit_id` clicked this output (deterministic)."""
    p = click_probability(model, output_text, prompt_messages=prompt_messages, fault=fault)
    return _rng(seed, unit_id, output_text, "click").random() < p
