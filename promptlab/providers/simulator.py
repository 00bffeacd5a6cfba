"""The simulated model: deterministic text or JSON, latency, faults and user feedback.

Everything here is simulated: outputs say so in their model version, and the numbers
(latency, click-through) come from the small, documented formulas below, not from
any real model. The same seed and request always give the same output.
"""

from __future__ import annotations

import json
import math
import random
import re
from collections.abc import Iterable, Mapping, Sequence
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
        SimModel("careful", "high quality, slower, longer", 0.9, 900, 0.35, 12, 160, 0.3,
                 0.01, 0.01, 0.01, 0.22),
        SimModel("balanced", "middle of the road", 0.7, 450, 0.4, 8, 90, 0.35,
                 0.04, 0.02, 0.03, 0.16),
        SimModel("fast", "quick and terse", 0.55, 180, 0.3, 4, 35, 0.3,
                 0.05, 0.02, 0.05, 0.12),
        SimModel("sloppy", "cheap, often breaks JSON", 0.35, 300, 0.6, 6, 70, 0.6,
                 0.20, 0.08, 0.12, 0.08),
        SimModel("pocket", "tiny 512-token window (shows context shards)", 0.5, 200, 0.3, 4,
                 40, 0.3, 0.05, 0.02, 0.05, 0.10),
    )
}  # fmt: skip
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


# --- plain text ------------------------------------------------------------------------

_STOPWORD_TEXT = (
    "about above after again also always because been before being below between both "
    "could does doing down during each from further have having here into itself just "
    "more most other over own same should some such than that their them then there "
    "these they this those through under until very what when where which while whom "
    "with would your yours please write give make using answer following given"
)
_STOPWORDS = frozenset(_STOPWORD_TEXT.split())
_WORD = re.compile(r"[A-Za-z][A-Za-z\-]{3,}")
#: Words as cue phrases are matched: letters and digits, with inner hyphens and apostrophes.
_WORD_OR_DIGITS = re.compile(r"[a-z0-9][a-z0-9'\-]*")
_OPENERS = (
    "In short,", "Put simply,", "The key point is that", "First,", "Then,", "Note that",
    "In practice,", "Overall,", "As a rule,", "Importantly,", "For most readers,",
)  # fmt: skip
_VERBS = (
    "improves", "depends on", "shapes", "clarifies", "supports", "simplifies", "affects",
    "strengthens", "reveals", "balances",
)  # fmt: skip
_NOUNS = (
    "the overall result", "the main goal", "user trust", "the next step", "clarity",
    "the final outcome", "day-to-day use", "long-term value", "the key trade-off",
    "the expected cost", "response quality", "the first impression",
)  # fmt: skip
_FALLBACK_TOPICS = ("the request", "the product", "the answer", "the topic")


def _topics(messages: Iterable[Mapping[str, str]]) -> list[str]:
    user = [str(m.get("content", "")) for m in messages if m.get("role") != "system"]
    seen: dict[str, None] = {}
    for word in _WORD.findall(user[-1] if user else ""):
        low = word.lower()
        if low not in _STOPWORDS:
            seen.setdefault(low, None)
    return list(seen)[:8] or list(_FALLBACK_TOPICS)


def _pick(rng: random.Random, items: Sequence[str]) -> str:
    # Cheaper than rng.choice, which matters at fakellm's thousands of requests a second.
    return items[int(rng.random() * len(items))]


def _sentence(rng: random.Random, topics: list[str]) -> str:
    return f"{_pick(rng, _OPENERS)} {_pick(rng, topics)} {_pick(rng, _VERBS)} {_pick(rng, _NOUNS)}."


#: A rough words-to-tokens ratio used only to size the text before exact counting.
TOKENS_PER_WORD = 1.3


def _plain_text(rng: random.Random, topics: list[str], target_tokens: int, bullets: bool) -> str:
    sentences: list[str] = []
    words = 0
    while words * TOKENS_PER_WORD < target_tokens:
        sentence = _sentence(rng, topics)
        sentences.append(f"- {sentence}" if bullets else sentence)
        words += sentence.count(" ") + 1
    return ("\n" if bullets else " ").join(sentences)


def _truncate_to_tokens(text: str, max_tokens: int) -> str:
    words = text.split(" ")
    tokens = count_tokens(text)
    if tokens <= max_tokens:
        return text
    keep = max(1, int(len(words) * max_tokens / tokens))
    while keep > 1 and count_tokens(" ".join(words[:keep])) > max_tokens:
        keep -= 1
    return " ".join(words[:keep])


# --- JSON that fits a schema -----------------------------------------------------------

#: Guards against self-referencing schemas.
MAX_SCHEMA_DEPTH = 6


def instance_for_schema(
    schema: Mapping[str, Any], rng: random.Random, topics: list[str], root: Mapping[str, Any]
) -> Any:
    """A value that validates against `schema` (the common JSON Schema keywords)."""
    return _instance(schema, rng, topics, root, 0)


def _instance(
    schema: Mapping[str, Any], rng: random.Random, topics: list[str], root: Mapping[str, Any],
    depth: int,
) -> Any:  # fmt: skip
    if "$ref" in schema and depth < MAX_SCHEMA_DEPTH:
        return _instance(_resolve_ref(root, schema["$ref"]), rng, topics, root, depth + 1)
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return rng.choice(list(schema["enum"]))
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return _instance(rng.choice(list(schema[key])), rng, topics, root, depth + 1)
    if "allOf" in schema:
        merged: dict[str, Any] = {}
        for part in schema["allOf"]:
            merged.update(part)
        return _instance(merged, rng, topics, root, depth + 1)
    kind = schema.get("type", "object" if "properties" in schema else "string")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object":
        return _object(schema, rng, topics, root, depth)
    if kind == "array":
        return _array(schema, rng, topics, root, depth)
    if kind == "integer":
        low, high = _bounds(schema, 0, 100)
        return rng.randint(math.ceil(low), math.floor(high))
    if kind == "number":
        low, high = _bounds(schema, 0.0, 1.0)
        return round(rng.uniform(low, high), 3)
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "null":
        return None
    return _string(schema, rng, topics)


def _resolve_ref(root: Mapping[str, Any], ref: str) -> Mapping[str, Any]:
    node: Any = root
    for part in ref.removeprefix("#/").split("/"):
        if not part:
            continue
        node = node.get(part, {}) if isinstance(node, Mapping) else {}
    return node if isinstance(node, Mapping) else {}


def _object(
    schema: Mapping[str, Any], rng: random.Random, topics: list[str], root: Mapping[str, Any],
    depth: int,
) -> dict[str, Any]:  # fmt: skip
    props: Mapping[str, Any] = schema.get("properties", {})
    required = set(schema.get("required", ()))
    out: dict[str, Any] = {}
    for name, sub in props.items():
        if depth >= MAX_SCHEMA_DEPTH and name not in required:
            continue
        if name in required or rng.random() < 0.8:
            out[name] = _instance(sub, rng, topics, root, depth + 1)
    return out


def _array(
    schema: Mapping[str, Any], rng: random.Random, topics: list[str], root: Mapping[str, Any],
    depth: int,
) -> list[Any]:  # fmt: skip
    low = int(schema.get("minItems", 1))
    high = int(schema.get("maxItems", max(low, 3)))
    items = schema.get("items", {"type": "string"})
    if depth >= MAX_SCHEMA_DEPTH:
        high = low
    return [_instance(items, rng, topics, root, depth + 1) for _ in range(rng.randint(low, high))]


def _bounds(schema: Mapping[str, Any], low: float, high: float) -> tuple[float, float]:
    low = schema.get("minimum", schema.get("exclusiveMinimum", low - 1) + 1)
    high = schema.get("maximum", schema.get("exclusiveMaximum", high + 1) - 1)
    return (low, max(low, high))


def _string(schema: Mapping[str, Any], rng: random.Random, topics: list[str]) -> str:
    fmt = schema.get("format")
    if fmt == "date":
        return f"2025-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
    if fmt == "email":
        return f"{rng.choice(topics).replace(' ', '.')}@example.com"
    text = _sentence(rng, topics)
    low = int(schema.get("minLength", 0))
    high = int(schema.get("maxLength", 10_000))
    while len(text) < low:
        text += " " + _sentence(rng, topics)
    return text[:high]


def _break_schema(value: Any, schema: Mapping[str, Any], rng: random.Random) -> Any:
    """Valid JSON that no longer fits: drop a required field or change a field's type."""
    if isinstance(value, dict) and value:
        required = [r for r in schema.get("required", ()) if r in value]
        broken = dict(value)
        if required and rng.random() < 0.5:
            del broken[rng.choice(required)]
        else:
            key = rng.choice(list(broken))
            broken[key] = 42 if isinstance(broken[key], str) else "not-the-right-type"
        return broken
    return {"unexpected": value}


def _malform(text: str, rng: random.Random) -> str:
    """Syntactically broken JSON of the kinds real models produce."""
    variant = rng.randrange(4)
    if variant == 0:
        return f"Here is the JSON you asked for:\n```json\n{text}\n```"
    if variant == 1 and text.endswith("}"):
        return text[:-1] + ",}"
    if variant == 2:
        return text.replace('"', "'")
    return text.rstrip("}]")


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
    schema = json.dumps(request.output_schema, sort_keys=True)
    messages = _messages_key(request.messages)
    if request.sample is None:
        rng = _rng(seed, sim.name, request.seed, request.temperature, request.top_p,
                   request.max_tokens, messages, schema)  # fmt: skip
    else:  # a repeat: the same answer at temperature 0, re-drawn choices above it
        rng = _draws(request, sim, seed, sim.name, request.seed, request.max_tokens, messages,
                     schema)  # fmt: skip
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
    topics = _topics(request.messages)
    fault: str | None = None
    finish = FinishReason.STOP
    if request.output_schema is not None:
        text, fault = _json_output(request, sim, rng, topics, rates, fault_scale)
        if fault == FAULT_TRUNCATED:
            finish = FinishReason.LENGTH
    else:
        text = _plain_text(rng, topics, target, bullets=sim.quality >= 0.85)
    output_tokens = count_tokens(text)
    if output_tokens > request.max_tokens:
        text = _truncate_to_tokens(text, request.max_tokens)
        output_tokens = count_tokens(text)
        finish = FinishReason.LENGTH
        if request.output_schema is not None:
            fault = FAULT_TRUNCATED
    latency = (
        sim.median_latency_ms * math.exp(sim.latency_sigma * rng.gauss(0, 1))
        + sim.ms_per_output_token * output_tokens
        + MS_PER_INPUT_TOKEN * input_tokens
    )
    if request.sample is not None:  # a server's time varies call to call, whatever the T
        latency *= math.exp(QUEUE_JITTER * _rng("queue", messages, request.sample).gauss(0, 1))
    return SimOutput(
        text=text,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        finish_reason=finish,
        latency_ms=round(latency, 3),
        fault=fault,
        model_version=model_version(sim),
    )


#: Output tokens a simulated answer carries log-probabilities for (the first ones).
LOGPROB_TOKENS = 64


def _draws(request: CompletionRequest, sim: SimModel, *key: object) -> random.Random:
    """A repeat's generator for the draws keyed by `key` (providers/simdraws.py)."""
    return repeat_draws(sim.name, sim.quality, _messages_key(request.messages),
                        request.temperature, request.top_p, request.sample, *key)  # fmt: skip


def chosen_logprob(request: CompletionRequest, model: str | SimModel, output_tokens: int) -> (
    tuple[float, int]
):  # fmt: skip
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


# --- reading labels: how the simulated model gets a label right ---------------------

#: Cue words and phrases for labels support tools use (the demo's ticket categories).
#: A top-level string field whose enum holds such labels is "read" off the last user
#: message: the label with the most cues found (whole words; the first in enum order on
#: a tie) is what the model answers, when it reads at all (`_reads`).
LABEL_CUES: dict[str, tuple[str, ...]] = {
    "billing": ("charged", "charge", "invoice", "refund", "payment", "payments", "billed",
                "card", "discount", "receipts", "receipt", "vat", "downgrade", "renewal",
                "price", "subscription"),
    "bug": ("error", "crash", "crashes", "broken", "bug", "does nothing", "fail", "fails",
            "stopped working", "blank", "slow", "twice for every", "loses", "late",
            "don't include", "loops"),
    "account": ("account", "email", "password", "log in", "login", "sign-in",
                "two-factor", "locked out", "workspace", "invite"),
    "feature_request": ("would be great", "would be nice", "could you add", "please add",
                        "please support", "can we get", "feature", "option"),
    "other": ("legal", "soc 2", "typo", "agreement"),
}  # fmt: skip


def read_label(text: str, labels: Sequence[str]) -> str | None:
    """The label of `labels` whose cues appear most often in `text` (None: no cue)."""
    low = f" {' '.join(_WORD_OR_DIGITS.findall(text.lower()))} "
    counts = {label: sum(low.count(f" {cue} ") for cue in LABEL_CUES.get(label, ()))
              for label in labels}  # fmt: skip
    best = max(labels, key=lambda label: counts[label], default=None)
    return best if best is not None and counts[best] > 0 else None


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
    request: CompletionRequest, sim: SimModel, rng: random.Random, topics: list[str],
    rates: FaultRates | None, fault_scale: float,
) -> tuple[str, str | None]:  # fmt: skip
    schema = request.output_schema or {}
    value = _read_labels(instance_for_schema(schema, rng, topics, schema), request, sim)
    rates = rates or FaultRates()
    malformed = _rate(rates.malformed, sim.malformed_rate, fault_scale)
    truncated = _rate(rates.truncated, sim.truncated_rate, fault_scale)
    broken = _rate(rates.schema_break, sim.schema_break_rate, fault_scale)
    draw = rng.random()
    if draw < malformed:
        return _malform(json.dumps(value), rng), FAULT_MALFORMED
    if draw < malformed + truncated:
        text = json.dumps(value)
        return text[: max(1, int(len(text) * rng.uniform(0.3, 0.9)))], FAULT_TRUNCATED
    if draw < malformed + truncated + broken:
        return json.dumps(_break_schema(value, schema, rng)), FAULT_SCHEMA
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
