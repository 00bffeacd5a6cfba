"""fakellm's requests off the wire: OpenAI and Anthropic bodies parsed and checked as
strictly as the real APIs check them (what it answers is in fakellm/bodies.py, re-exported
here).

Shapes follow what the official SDKs send (checked against openai 3.x and anthropic 2.x);
refusals use the real APIs' wording.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from promptlab.fakellm.bodies import WORDS_PER_CHUNK as WORDS_PER_CHUNK
from promptlab.fakellm.bodies import anthropic_error as anthropic_error
from promptlab.fakellm.bodies import anthropic_message as anthropic_message
from promptlab.fakellm.bodies import anthropic_reset as anthropic_reset
from promptlab.fakellm.bodies import anthropic_stream as anthropic_stream
from promptlab.fakellm.bodies import chunks_of as chunks_of
from promptlab.fakellm.bodies import dumps as dumps
from promptlab.fakellm.bodies import openai_completion as openai_completion
from promptlab.fakellm.bodies import openai_duration as openai_duration
from promptlab.fakellm.bodies import openai_error as openai_error
from promptlab.fakellm.bodies import openai_stream as openai_stream
from promptlab.fakellm.bodies import retry_headers as retry_headers
from promptlab.providers.base import CompletionRequest

#: What OpenAI assumes for the token-limit check when a request names no max_tokens.
DEFAULT_MAX_TOKENS = 1024


# Not a PromptlabError: the fake server answers it as an HTTP 400 to its client; it is
# never raised to a promptlab caller.
class WireError(Exception):
    """A request the real API would reject with 400 invalid_request_error."""

    def __init__(self, message: str, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.param = param
        self.code = code


#: Chat Completions request fields the real API knows; anything else is a 400.
OPENAI_FIELDS = frozenset(
    {
        "messages",
        "model",
        "audio",
        "frequency_penalty",
        "function_call",
        "functions",
        "logit_bias",
        "logprobs",
        "max_completion_tokens",
        "max_tokens",
        "metadata",
        "modalities",
        "moderation",
        "n",
        "parallel_tool_calls",
        "prediction",
        "presence_penalty",
        "prompt_cache_key",
        "prompt_cache_options",
        "prompt_cache_retention",
        "reasoning_effort",
        "response_format",
        "safety_identifier",
        "seed",
        "service_tier",
        "stop",
        "store",
        "stream",
        "stream_options",
        "temperature",
        "tool_choice",
        "tools",
        "top_logprobs",
        "top_p",
        "user",
        "verbosity",
        "web_search_options",
    }
)
#: Messages API request fields; the sampling ones only exist before API version 2026-10-21.
ANTHROPIC_FIELDS = frozenset(
    {
        "model",
        "messages",
        "max_tokens",
        "cache_control",
        "container",
        "diagnostics",
        "inference_geo",
        "metadata",
        "output_config",
        "service_tier",
        "speed",
        "stop_sequences",
        "stream",
        "system",
        "thinking",
        "tool_choice",
        "tools",
        "user_profile_id",
        "workspace_id",
    }
)
ANTHROPIC_SAMPLING = ("temperature", "top_p", "top_k")
#: The last Anthropic API version that accepts sampling parameters, and the first that
#: answers 400 to them (the version anthropic>=2 sends by default).
ANTHROPIC_SAMPLING_VERSION = "2023-06-01"
ANTHROPIC_NO_SAMPLING_VERSION = "2026-10-21"
ANTHROPIC_VERSIONS = frozenset({"2023-01-01", "2023-06-01", ANTHROPIC_NO_SAMPLING_VERSION})
#: Models that take temperature or top_p but not both, and models that take neither
#: (Anthropic's model migration guides); matched by name prefix.
_ONE_SAMPLING_PARAM = ("claude-sonnet-4-5", "claude-haiku-4-5", "claude-opus-4-1")
_NO_SAMPLING = ("claude-opus-4-7", "claude-opus-4-8", "claude-sonnet-5", "claude-fable")


@dataclass(frozen=True)
class ParsedRequest:
    """A request off the wire, in promptlab's own shape."""

    completion: CompletionRequest
    stream: bool
    include_usage: bool


def _text(content: Any) -> str:
    """Message content as text: a string, or the text parts of a content-block list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, Mapping))
    raise WireError("message content must be a string or a list of content parts")


def _messages(raw: Any) -> tuple[dict[str, str], ...]:
    if not isinstance(raw, list) or not raw:
        raise WireError("'messages' must be a non-empty array")
    out = []
    for item in raw:
        if not isinstance(item, Mapping) or "role" not in item:
            raise WireError("each message needs a 'role' and 'content'")
        out.append({"role": str(item["role"]), "content": _text(item.get("content", ""))})
    return tuple(out)


def _number(body: Mapping[str, Any], key: str) -> float | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise WireError(f"'{key}' must be a number", key, "invalid_type")
    return float(value)


def _openai_range(body: Mapping[str, Any], key: str, top: float) -> float | None:
    """A number in [0, top], refused with OpenAI's own wording otherwise."""
    value = _number(body, key)
    if value is not None and value > top:
        raise WireError(
            f"Invalid '{key}': decimal above maximum value. Expected a value <= {top:g}, "
            f"but got {value:g} instead.",
            key,
            "decimal_above_max_value",
        )
    if value is not None and value < 0:
        raise WireError(
            f"Invalid '{key}': decimal below minimum value. Expected a value >= 0, "
            f"but got {value:g} instead.",
            key,
            "decimal_below_min_value",
        )
    return value


def _anthropic_range(body: Mapping[str, Any], key: str) -> float | None:
    """A number in [0, 1], refused with Anthropic's (pydantic) wording otherwise."""
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise WireError(f"{key}: Input should be a valid number")
    if value > 1:
        raise WireError(f"{key}: Input should be less than or equal to 1")
    if value < 0:
        raise WireError(f"{key}: Input should be greater than or equal to 0")
    return float(value)


def _max_tokens(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise WireError("'max_tokens' must be a positive integer")
    return value


def parse_openai(body: Any, request_id: str | None) -> ParsedRequest:
    """A `/v1/chat/completions` body, checked as strictly as the real API checks it."""
    if not isinstance(body, Mapping) or not isinstance(body.get("model"), str):
        raise WireError("you must provide a model parameter", "model", "missing_required_parameter")
    unknown = sorted(set(body) - OPENAI_FIELDS)
    if unknown:
        raise WireError(f"Unrecognized request argument supplied: {unknown[0]}")
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    schema = _openai_schema(body.get("response_format"))
    seed = body.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise WireError(
            "Invalid type for 'seed': expected an integer, but got a decimal number instead.",
            "seed",
            "invalid_type",
        )
    stream_options = body.get("stream_options") or {}
    return ParsedRequest(
        completion=CompletionRequest(
            model=body["model"],
            messages=_messages(body.get("messages")),
            max_tokens=DEFAULT_MAX_TOKENS if max_tokens is None else _max_tokens(max_tokens),
            temperature=_openai_range(body, "temperature", 2.0),
            top_p=_openai_range(body, "top_p", 1.0),
            output_schema=schema,
            seed=seed,
            request_id=request_id,
            top_logprobs=_top_logprobs(body),
        ),
        stream=bool(body.get("stream")),
        include_usage=bool(stream_options.get("include_usage")),
    )


def _top_logprobs(body: Mapping[str, Any]) -> int | None:
    """How many log-probabilities per token were asked for (`logprobs: true` and
    `top_logprobs`, 0 to 20, as the API takes them); None when none were."""
    top = body.get("top_logprobs")
    if top is not None and (
        isinstance(top, bool) or not isinstance(top, int) or not 0 <= top <= 20
    ):
        raise WireError(
            f"Invalid 'top_logprobs': integer below minimum value or above maximum "
            f"value. Expected a value between 0 and 20, got {top!r}.",
            "top_logprobs",
            "integer_out_of_range",
        )
    if not body.get("logprobs"):
        if top is not None:
            raise WireError("top_logprobs requires logprobs to be true", "top_logprobs")
        return None
    return top or 1


def _openai_schema(fmt: Any) -> Mapping[str, Any] | None:
    if fmt is None:
        return None
    kind = fmt.get("type") if isinstance(fmt, Mapping) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "object"}
    if kind != "json_schema":
        raise WireError(
            f"Invalid value: {kind!r}. Supported values are: 'text', 'json_object', and "
            "'json_schema'.",
            "response_format.type",
            "invalid_value",
        )
    spec = fmt.get("json_schema")
    if not isinstance(spec, Mapping) or not isinstance(spec.get("name"), str):
        raise WireError(
            "Missing required parameter: 'response_format.json_schema.name'.",
            "response_format.json_schema.name",
            "missing_required_parameter",
        )
    schema = spec.get("schema") or {"type": "object"}
    return schema if isinstance(schema, Mapping) else {"type": "object"}


def parse_anthropic(body: Any, request_id: str | None, version: str | None = None) -> ParsedRequest:
    """A `/v1/messages` body under `anthropic-version` `version`, checked like the real API.

    Lenient in one way: no version header counts as 2023-06-01 (the real API answers 400),
    so hand-made requests (bench/) need not send one.
    """
    version = version or ANTHROPIC_SAMPLING_VERSION
    if version not in ANTHROPIC_VERSIONS:
        raise WireError(f"anthropic-version: invalid version {version!r}")
    if not isinstance(body, Mapping) or not isinstance(body.get("model"), str):
        raise WireError("model: Field required")
    if "max_tokens" not in body:
        raise WireError("max_tokens: Field required")
    known = ANTHROPIC_FIELDS
    if version != ANTHROPIC_NO_SAMPLING_VERSION:
        known = known | set(ANTHROPIC_SAMPLING)
    unknown = sorted(set(body) - known)
    if unknown:
        raise WireError(f"{unknown[0]}: Extra inputs are not permitted")
    temperature = _anthropic_range(body, "temperature")
    top_p = _anthropic_range(body, "top_p")
    top_k = body.get("top_k")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 0):
        raise WireError("top_k: Input should be a valid non-negative integer")
    _check_sampling_for_model(body["model"], [k for k in ANTHROPIC_SAMPLING if k in body])
    messages = _messages(body.get("messages"))
    system = body.get("system")
    if system:
        messages = ({"role": "system", "content": _text(system)}, *messages)
    return ParsedRequest(
        completion=CompletionRequest(
            model=body["model"],
            messages=messages,
            max_tokens=_max_tokens(body["max_tokens"]),
            temperature=temperature,
            top_p=top_p,
            output_schema=_anthropic_schema(body.get("output_config")),
            request_id=request_id,
        ),
        stream=bool(body.get("stream")),
        include_usage=True,
    )


def _check_sampling_for_model(model: str, sampling: list[str]) -> None:
    if sampling and model.startswith(_NO_SAMPLING):
        raise WireError(f"`{sampling[0]}` is deprecated for this model.")
    if {"temperature", "top_p"} <= set(sampling) and model.startswith(_ONE_SAMPLING_PARAM):
        raise WireError(
            "`temperature` and `top_p` cannot both be specified for this model. "
            "Please use only one."
        )


def _anthropic_schema(output_config: Any) -> Mapping[str, Any] | None:
    if output_config is None:
        return None
    if not isinstance(output_config, Mapping):
        raise WireError("output_config: Input should be a valid dictionary")
    fmt = output_config.get("format")
    if fmt is None:
        return None
    if not isinstance(fmt, Mapping) or fmt.get("type") != "json_schema":
        raise WireError("output_config.format.type: Input should be 'json_schema'")
    schema = fmt.get("schema")
    if not isinstance(schema, Mapping):
        raise WireError("output_config.format.schema: Field required")
    return schema
