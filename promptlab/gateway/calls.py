"""What an application asked the gateway: its body in OpenAI's or Anthropic's format, read.

An application keeps the SDK it uses and points its `base_url` at promptlab. The body
names what to serve in `model` (promptlab/gateway/targets.py), the unit in OpenAI's
`user` field or Anthropic's `metadata.user_id` (else the `Promptlab-Unit` header), the
template's variables in `variables` (the SDKs' `extra_body`), and its own conversation
in `messages`, which follows the served version's rendered messages. Everything is read
here by hand from the raw bytes, bounded, and a bad field is a CallRefused naming it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import orjson

OPENAI, ANTHROPIC = "openai", "anthropic"
#: Messages a call may carry of its own (a chat app's history and latest turn).
MAX_MESSAGES = 1_000
#: The longest unit id: it is stored and compared as written.
MAX_UNIT_CHARS = 200
#: Variables a call may give (a template names far fewer).
MAX_VARIABLES = 200
#: Fields that would change what the gateway must do with an answer; it does not do them.
UNSUPPORTED = ("tools", "tool_choice", "functions", "response_format", "logprobs", "n")
_ROLES = frozenset({"system", "user", "assistant"})


class CallRefused(Exception):
    """A call the gateway will not send: its HTTP status, and one line naming the field."""

    def __init__(self, status: int, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param


@dataclass(frozen=True)
class CallIn:
    """A call as the gateway reads it, whichever wire format it came in."""

    wire: str
    model: str
    messages: tuple[dict[str, str], ...]
    unit: str | None
    variables: dict[str, Any]
    stream: bool
    #: OpenAI's `stream_options.include_usage`: a last chunk carries the usage.
    include_usage: bool = False
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    stop: tuple[str, ...] = ()


def openai_call(raw: bytes, unit_header: str | None) -> CallIn:
    """A `POST /v1/chat/completions` body."""
    body = _object(raw)
    _refuse_unsupported(body)
    options = body.get("stream_options")
    include_usage = isinstance(options, dict) and options.get("include_usage") is True
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    return CallIn(
        wire=OPENAI,
        model=_model(body),
        messages=_messages(body.get("messages"), "messages"),
        unit=_unit(body.get("user"), "user", unit_header),
        variables=_variables(body.get("variables")),
        stream=_flag(body, "stream"),
        include_usage=include_usage,
        max_tokens=_count(max_tokens, "max_tokens"),
        temperature=_number(body, "temperature", 2.0),
        top_p=_number(body, "top_p", 1.0),
        stop=_stops(body.get("stop"), "stop"),
    )


def anthropic_call(raw: bytes, unit_header: str | None) -> CallIn:
    """A `POST /v1/messages` body; its `system` is one more system message."""
    body = _object(raw)
    _refuse_unsupported(body)
    metadata = body.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        raise CallRefused(422, "metadata: expected an object", "metadata")
    user_id = metadata.get("user_id") if metadata else None
    system = _system(body.get("system"))
    messages = _messages(body.get("messages"), "messages")
    return CallIn(
        wire=ANTHROPIC,
        model=_model(body),
        messages=(*system, *messages),
        unit=_unit(user_id, "metadata.user_id", unit_header),
        variables=_variables(body.get("variables")),
        stream=_flag(body, "stream"),
        max_tokens=_count(body.get("max_tokens"), "max_tokens"),
        temperature=_number(body, "temperature", 1.0),
        top_p=_number(body, "top_p", 1.0),
        stop=_stops(body.get("stop_sequences"), "stop_sequences"),
    )


def _object(raw: bytes) -> dict[str, Any]:
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise CallRefused(400, "body: not JSON") from None
    if not isinstance(body, dict):
        raise CallRefused(400, "body: expected a JSON object")
    return body


def _refuse_unsupported(body: dict[str, Any]) -> None:
    for field in UNSUPPORTED:
        value = body.get(field)
        if value is not None and not (field == "n" and value == 1):
            raise CallRefused(
                422, f"{field}: not supported by the promptlab gateway; leave it out", field
            )


def _model(body: dict[str, Any]) -> str:
    model = body.get("model")
    if not isinstance(model, str) or not model.strip():
        raise CallRefused(
            422, "model: required (experiment:NAME, prompt:NAME@label or prompt:NAME@1.2.0)"
        )
    return model.strip()


def _messages(value: Any, where: str) -> tuple[dict[str, str], ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or len(value) > MAX_MESSAGES:
        raise CallRefused(422, f"{where}: expected a list of at most {MAX_MESSAGES:,}", where)
    messages = []
    for index, message in enumerate(value):
        here = f"{where}[{index}]"
        if not isinstance(message, dict) or message.get("role") not in _ROLES:
            raise CallRefused(422, f"{here}.role: one of system, user, assistant", here)
        messages.append({"role": message["role"], "content": _text(message.get("content"), here)})
    return tuple(messages)


def _text(content: Any, where: str) -> str:
    """A message's text: a string, or a list of text parts joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text":
                raise CallRefused(422, f"{where}.content: only text parts are supported", where)
            parts.append(str(part.get("text", "")))
        return "".join(parts)
    raise CallRefused(422, f"{where}.content: expected text", where)


def _system(value: Any) -> tuple[dict[str, str], ...]:
    if value is None:
        return ()
    return ({"role": "system", "content": _text(value, "system")},)


def _unit(value: Any, field: str, header: str | None) -> str | None:
    unit = value if value is not None else header
    if unit is None:
        return None
    if not isinstance(unit, str) or not unit.strip() or len(unit) > MAX_UNIT_CHARS:
        raise CallRefused(422, f"{field}: the unit, a text of 1 to {MAX_UNIT_CHARS} characters")
    return unit


def _variables(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict) or len(value) > MAX_VARIABLES:
        raise CallRefused(
            422, f"variables: expected an object of at most {MAX_VARIABLES} values", "variables"
        )
    return value


def _flag(body: dict[str, Any], field: str) -> bool:
    value = body.get(field, False)
    if not isinstance(value, bool):
        raise CallRefused(422, f"{field}: expected true or false", field)
    return value


def _count(value: Any, field: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= 1_000_000:
        raise CallRefused(422, f"{field}: expected a whole number from 1 to 1,000,000", field)
    return value


def _number(body: dict[str, Any], field: str, top: float) -> float | None:
    value = body.get(field)
    if value is None:
        return None
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if not ok or not math.isfinite(value) or not 0 <= value <= top:
        raise CallRefused(422, f"{field}: expected a number from 0 to {top:g}", field)
    return float(value)


def _stops(value: Any, field: str) -> tuple[str, ...]:
    if value is None:
        return ()
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or len(stops) > 4 or not all(isinstance(s, str) for s in stops):
        raise CallRefused(422, f"{field}: a text or a list of at most 4", field)
    return tuple(stops)
