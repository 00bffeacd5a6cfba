"""The OpenAI and Anthropic wire formats: request bodies, headers, response fields.

Imported by no SDK, shared by both transports: the SDK adapters (openai.py,
anthropic.py) send these bodies through the SDKs, the lean path (http.py) posts them
itself, so the two cannot drift apart.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from promptlab.providers.base import REQUEST_ID_HEADER, CompletionRequest, FinishReason

#: The API version header of the Messages API.
VERSION_HEADER = "anthropic-version"
#: The version the anthropic SDK (>=2.14) sends; the lean path sends the same.
DEFAULT_API_VERSION = "2026-10-21"
#: The last API version that accepts sampling parameters (2026-10-21 answers 400).
SAMPLING_API_VERSION = "2023-06-01"
#: Sampling parameters the Messages API takes only under SAMPLING_API_VERSION.
ANTHROPIC_SAMPLING = ("temperature", "top_p")
#: Output tokens whose log-probabilities an entropy reads (a long answer's first ones).
MAX_ENTROPY_TOKENS = 4_096

OPENAI_FINISH_REASONS = {
    "stop": FinishReason.STOP,
    "length": FinishReason.LENGTH,
    "content_filter": FinishReason.CONTENT_FILTER,
    "tool_calls": FinishReason.TOOL_CALLS,
    "function_call": FinishReason.TOOL_CALLS,
}

ANTHROPIC_FINISH_REASONS = {
    "end_turn": FinishReason.STOP,
    "stop_sequence": FinishReason.STOP,
    "pause_turn": FinishReason.STOP,
    "max_tokens": FinishReason.LENGTH,
    "model_context_window_exceeded": FinishReason.LENGTH,
    "tool_use": FinishReason.TOOL_CALLS,
    "refusal": FinishReason.CONTENT_FILTER,
}

#: How each format writes a finish reason (what a server answers: fakellm, the gateway).
OPENAI_FINISH = {
    FinishReason.STOP: "stop",
    FinishReason.LENGTH: "length",
    FinishReason.CONTENT_FILTER: "content_filter",
    FinishReason.TOOL_CALLS: "tool_calls",
}
ANTHROPIC_STOP = {
    FinishReason.STOP: "end_turn",
    FinishReason.LENGTH: "max_tokens",
    FinishReason.CONTENT_FILTER: "refusal",
    FinishReason.TOOL_CALLS: "tool_use",
}


def openai_body(request: CompletionRequest, max_tokens_param: str) -> dict[str, Any]:
    """The chat-completions body; `max_tokens_param` is max_tokens or max_completion_tokens.

    The official API wants max_completion_tokens (reasoning models reject max_tokens);
    compatible servers (vLLM, Ollama) only know max_tokens.
    """
    body: dict[str, Any] = {
        "model": request.model,
        "messages": [dict(m) for m in request.messages],
        max_tokens_param: request.max_tokens,
    }
    for key in ("temperature", "top_p", "seed"):
        value = getattr(request, key)
        if value is not None:
            body[key] = value
    if request.top_logprobs is not None:
        body["logprobs"] = True
        body["top_logprobs"] = request.top_logprobs
    if request.output_schema is not None:
        body["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": "output", "schema": dict(request.output_schema)},
        }
    for key, value in (request.extra or {}).items():
        body.setdefault(key, value)
    return body


def max_tokens_param(base_url: str | None) -> str:
    """max_completion_tokens for the official OpenAI API (no base_url), else max_tokens."""
    return "max_completion_tokens" if not base_url else "max_tokens"


def request_id_headers(request: CompletionRequest) -> dict[str, str]:
    """The item's idempotency key header, when the request has one."""
    return {REQUEST_ID_HEADER: request.request_id} if request.request_id else {}


def anthropic_body(request: CompletionRequest) -> dict[str, Any]:
    """The Messages API body: system messages go to `system`, the rest stay in order.

    `temperature` and `top_p` are in it when set; send it with `anthropic_headers`,
    which pins the API version that accepts them.
    """
    system = [str(m["content"]) for m in request.messages if m.get("role") == "system"]
    body: dict[str, Any] = {
        "model": request.model,
        "messages": [_message(m) for m in request.messages if m.get("role") != "system"],
        "max_tokens": request.max_tokens,
    }
    if system:
        body["system"] = "\n\n".join(system)
    for key in ANTHROPIC_SAMPLING:
        value = getattr(request, key)
        if value is not None:
            body[key] = value
    if request.output_schema is not None:
        body["output_config"] = {
            "format": {"type": "json_schema", "schema": dict(request.output_schema)}
        }
    extra = request.extra or {}
    if "stop" in extra:
        stop = extra["stop"]
        body["stop_sequences"] = [stop] if isinstance(stop, str) else list(stop)
    if "user" in extra:
        body["metadata"] = {"user_id": extra["user"]}
    return body


def anthropic_headers(request: CompletionRequest) -> dict[str, str]:
    """Per-request headers: the sampling API version when needed, the request id."""
    headers = request_id_headers(request)
    if any(getattr(request, key) is not None for key in ANTHROPIC_SAMPLING):
        headers[VERSION_HEADER] = SAMPLING_API_VERSION
    return headers


def _message(message: Mapping[str, str]) -> dict[str, str]:
    return {"role": message.get("role", "user"), "content": str(message.get("content", ""))}


# Not a PromptlabError: the HTTP client catches it and raises a ProviderError instead.
class WireFormatError(ValueError):
    """A 200 answer whose JSON is not the shape the API documents."""


def parse_openai(data: Any) -> tuple[str, int, int, FinishReason, str]:
    """(text, input tokens, output tokens, finish reason, model) of a chat completion."""
    if not isinstance(data, Mapping):
        raise WireFormatError(f"expected a JSON object, got {type(data).__name__}")
    # An answer without its message is the server's fault, never an empty output.
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices:
        raise WireFormatError(f"'choices' is not a non-empty list: {_shown(choices)}")
    choice = choices[0]
    message = choice.get("message") if isinstance(choice, Mapping) else None
    if not isinstance(message, Mapping):
        raise WireFormatError(f"'choices[0]' has no 'message' object: {_shown(choice)}")
    usage = _mapping(data.get("usage"))
    finish = choice.get("finish_reason")
    return (
        str(message.get("content") or ""),
        _count(usage, "prompt_tokens"),
        _count(usage, "completion_tokens"),
        OPENAI_FINISH_REASONS.get(finish or "stop", FinishReason.STOP),
        str(data.get("model") or ""),
    )


def openai_token_entropy(data: Any) -> float | None:
    """The mean entropy (nats) of a chat completion's tokens, each over its returned top
    log-probabilities renormalized; None when it carries none."""
    choices = data.get("choices") if isinstance(data, Mapping) else None
    choice = choices[0] if isinstance(choices, list) and choices else None
    logprobs = _mapping(choice.get("logprobs") if isinstance(choice, Mapping) else None)
    content = logprobs.get("content")
    if not isinstance(content, list):
        return None
    positions = []
    for token in content[:MAX_ENTROPY_TOKENS]:
        top = _mapping(token).get("top_logprobs")
        values = (
            [t.get("logprob") for t in top if isinstance(t, Mapping)]
            if isinstance(top, list)
            else []
        )
        numbers = [float(v) for v in values if isinstance(v, int | float) and v <= 0]
        if numbers:
            positions.append(numbers)
    return mean_entropy(positions)


def openai_chosen_logprob(data: Any) -> tuple[float | None, int | None]:
    """(mean log-probability, tokens) of a chat completion's chosen tokens, when it
    carries `logprobs` (asked for with `logprobs: true`); (None, None) when not."""
    choices = data.get("choices") if isinstance(data, Mapping) else None
    choice = choices[0] if isinstance(choices, list) and choices else None
    logprobs = _mapping(choice.get("logprobs") if isinstance(choice, Mapping) else None)
    content = logprobs.get("content")
    values = [_mapping(t).get("logprob") for t in content] if isinstance(content, list) else []
    numbers = [float(v) for v in values if isinstance(v, int | float) and v <= 0]
    if not numbers:
        return None, None
    return sum(numbers) / len(numbers), len(numbers)


def mean_entropy(positions: list[list[float]]) -> float | None:
    """Mean over positions of the entropy of each one's log-probabilities, renormalized
    to sum to 1 (what was returned is the top few, not the whole vocabulary)."""
    if not positions:
        return None
    total = 0.0
    for logprobs in positions:
        probs = [math.exp(lp) for lp in logprobs]
        mass = sum(probs)
        total -= sum(p / mass * math.log(p / mass) for p in probs if p > 0)
    return total / len(positions)


def parse_anthropic(data: Any) -> tuple[str, int, int, FinishReason, str]:
    """(text, input tokens, output tokens, finish reason, model) of a Messages answer."""
    if not isinstance(data, Mapping):
        raise WireFormatError(f"expected a JSON object, got {type(data).__name__}")
    blocks = data.get("content")
    if not isinstance(blocks, list):
        raise WireFormatError(f"'content' is not a list: {_shown(blocks)}")
    text = "".join(str(b.get("text") or "") for b in blocks if isinstance(b, Mapping))
    usage = _mapping(data.get("usage"))
    return (
        text,
        _count(usage, "input_tokens"),
        _count(usage, "output_tokens"),
        ANTHROPIC_FINISH_REASONS.get(data.get("stop_reason") or "end_turn", FinishReason.STOP),
        str(data.get("model") or ""),
    )


def _shown(value: Any) -> str:
    """A wrong value as an error shows it: its repr, cut short."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _count(usage: Mapping[str, Any], key: str) -> int:
    value = usage.get(key) or 0
    if isinstance(value, bool) or not isinstance(value, int):
        raise WireFormatError(f"usage.{key} is not an integer: {value!r}")
    return value
