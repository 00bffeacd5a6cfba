"""Request files run as they are: OpenAI Batch input lines or bare chat-completion bodies.

A line is either `{"custom_id", "method", "url", "body"}` (the OpenAI Batch input
format) or a chat-completion body with an id field. Every line is checked before a run
exists; a bad one is refused with its line number. A run over such a file sends each
line's messages and params exactly as written, and its results can be written back in
the OpenAI Batch output format.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from promptlab.data.datasets import DATASET_LINES
from promptlab.data.jsonl import numbered_jsonl
from promptlab.errors import SpecError, TemplateError
from promptlab.prompts.sizes import MAX_MESSAGE_CHARS, MAX_RENDERED_CHARS
from promptlab.prompts.templates import ROLES, normalize_params

#: Body fields promptlab reads (limits, preflight, sampling rules); `max_completion_tokens`
#: is taken as `max_tokens`.
BODY_PARAMS = frozenset({"max_tokens", "max_completion_tokens", "temperature", "top_p", "seed"})
#: Chat Completions fields sent exactly as written (to an Anthropic endpoint only
#: ANTHROPIC_EXTRAS, translated).
BODY_EXTRAS = frozenset(
    {
        "metadata",
        "user",
        "store",
        "response_format",
        "stop",
        "frequency_penalty",
        "presence_penalty",
        "logit_bias",
        "logprobs",
        "top_logprobs",
        "service_tier",
        "reasoning_effort",
        "prompt_cache_key",
        "safety_identifier",
        "verbosity",
    }
)
#: Body fields accepted and not sent: the run names the model, the transport streams or
#: not, and `n` may only be 1 (one answer per request).
BODY_IGNORED = frozenset({"model", "n", "stream", "stream_options"})
BODY_FIELDS = BODY_PARAMS | BODY_EXTRAS | BODY_IGNORED | {"messages"}
#: Extras an Anthropic endpoint can take: `stop` as `stop_sequences`, `user` as
#: `metadata.user_id`.
ANTHROPIC_EXTRAS = frozenset({"stop", "user"})
BATCH_URL = "/v1/chat/completions"
DEFAULT_MAX_TOKENS = 256


@dataclass(frozen=True)
class BatchRequest:
    """One line of a request file: its id, messages, params and (optional) model."""

    custom_id: str
    messages: tuple[Mapping[str, str], ...]
    params: Mapping[str, Any]
    model: str | None
    #: Chat fields sent as written (BODY_EXTRAS).
    extra: Mapping[str, Any] = field(default_factory=dict)


def field_at(row: Mapping[str, Any], path: str) -> Any:
    """The value at a dotted path (`metadata.id`), or None when any step is missing."""
    value: Any = row
    for step in path.split("."):
        if not isinstance(value, Mapping) or step not in value:
            return None
        value = value[step]
    return value


def request_from_row(row: Mapping[str, Any], id_field: str = "custom_id") -> BatchRequest:
    """The request a line (already parsed JSON) describes; TemplateError says what is wrong.

    A line is an OpenAI Batch line (`custom_id`, `method`, `url`, `body`) or a bare chat
    body; `id_field` is a dotted path into the line (`metadata.id`).
    """
    body = row.get("body") if "body" in row else row
    batch_line = "body" in row
    if batch_line and (row.get("method", "POST"), row.get("url", BATCH_URL)) != ("POST", BATCH_URL):
        raise TemplateError(f"only POST {BATCH_URL} lines can run (got {row.get('url')!r})")
    if not isinstance(body, Mapping):
        raise TemplateError("'body' must be a JSON object")
    custom_id = field_at(row, id_field)
    if not isinstance(custom_id, str | int) or isinstance(custom_id, bool) or custom_id == "":
        raise TemplateError(f"'{id_field}' must be a non-empty string")
    # A bare body's own id field (a top-level `custom_id`) is the line's, not the API's.
    own_id = {id_field} if not batch_line and "." not in id_field else set()
    unknown = sorted(set(body) - BODY_FIELDS - own_id)
    if unknown:
        raise TemplateError(
            f"body fields not supported: {', '.join(unknown)} "
            f"(supported: {', '.join(sorted(BODY_FIELDS))})"
        )
    if body.get("n", 1) != 1:
        raise TemplateError(f"n: only 1 answer per request is supported, got {body['n']!r}")
    messages = _checked_messages(body.get("messages"))
    params = _checked_params(body)
    model = body.get("model")
    return BatchRequest(
        custom_id=str(custom_id),
        messages=tuple({"role": m["role"], "content": m["content"]} for m in messages),
        params=params,
        model=str(model) if model else None,
        extra={k: body[k] for k in sorted(BODY_EXTRAS) if k in body and body[k] is not None},
    )


def _checked_messages(messages: Any) -> list[Mapping[str, str]]:
    """A line's messages: a non-empty list of {role, content}, each and all bounded."""
    if not isinstance(messages, list) or not messages:
        raise TemplateError("'messages' must be a non-empty list")
    for index, message in enumerate(messages):
        if (
            not isinstance(message, Mapping)
            or message.get("role") not in ROLES
            or not isinstance(message.get("content"), str)
        ):
            raise TemplateError(
                f"messages[{index}]: expected {{role: {'|'.join(ROLES)}, content: text}}"
            )
        if len(message["content"]) > MAX_MESSAGE_CHARS:  # the bound a template has
            raise TemplateError(
                f"messages[{index}]: {len(message['content'])} characters, more than the "
                f"{MAX_MESSAGE_CHARS} allowed in a message"
            )
    # A request is no bigger than a rendered template may be (a 398 MB line was sent).
    size = sum(len(m["content"]) for m in messages)
    if size > MAX_RENDERED_CHARS:
        raise TemplateError(
            f"messages hold {size:,} characters, more than the {MAX_RENDERED_CHARS:,} a "
            "request may have"
        )
    return messages


def _checked_params(body: Mapping[str, Any]) -> dict[str, Any]:
    """The params a line sets (BODY_PARAMS), in the ranges a template's must have;
    `max_completion_tokens` taken as `max_tokens`."""
    params = {k: body[k] for k in BODY_PARAMS if k in body and body[k] is not None}
    if "max_completion_tokens" in params:
        params["max_tokens"] = params.pop("max_completion_tokens")
    params.setdefault("max_tokens", DEFAULT_MAX_TOKENS)
    seed = params.pop("seed", None)
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise TemplateError(f"seed: expected an integer, got {seed!r}")
    normalize_params({"model": "check:only", **params})  # the ranges a template's must have
    if seed is not None:
        params["seed"] = seed
    return params


def check_request_file(
    path: Path,
    id_field: str = "custom_id",
    refuse: Callable[[BatchRequest], str | None] | None = None,
    rows: Sequence[Mapping[str, Any]] | None = None,
) -> int:
    """Check every line of a request file; return the count. Ids must be unique, and
    `refuse` (the model's rules) names what a line asks that its model does not take.

    `rows`: every row of the file, in order, as already read (a run's count keeps a small
    file's): they are checked instead of the file being parsed again. A refused row is
    still named by its line number (the file is read up to it then).
    """
    seen: set[str] = set()
    count = 0
    numbered = _lines(path) if rows is None else enumerate(rows)

    def where(number: int) -> str:  # `number` is the row's index when `rows` are given
        return f"{path}, line {number if rows is None else _line_number(path, number)}"

    for number, row in numbered:
        try:
            problem = _problem(row, id_field, refuse, seen)
        except TemplateError as exc:
            raise SpecError(f"{where(number)}: {exc}") from exc
        if problem is not None:
            raise SpecError(f"{where(number)}: {problem}")
        count += 1
    if not count:
        raise SpecError(f"{path}: no requests")
    return count


def _problem(
    row: Mapping[str, Any],
    id_field: str,
    refuse: Callable[[BatchRequest], str | None] | None,
    seen: set[str],
) -> str | None:
    """What is wrong with one line (TemplateError when it is no request), or None; its
    id is then taken (`seen`)."""
    request = request_from_row(row, id_field)
    refused = refuse(request) if refuse is not None else None
    if refused is not None:
        return refused
    if request.custom_id in seen:
        return f"{id_field} {request.custom_id!r} repeats"
    seen.add(request.custom_id)
    return None


def _line_number(path: Path, index: int) -> int:
    """The line number of the file's row `index` (from 0; blank lines hold no row)."""
    return next(itertools.islice(_lines(path), index, None))[0]


def _lines(path: Path) -> Iterator[tuple[int, Mapping[str, Any]]]:
    # A request file is a dataset the run reads: the same reader, checks and limits.
    yield from numbered_jsonl(path, DATASET_LINES)


def first_model(path: Path) -> str | None:
    """The model the first line's body names, if any (the default for the whole file)."""
    for _number, row in _lines(path):
        body = row.get("body", row)
        model = body.get("model") if isinstance(body, Mapping) else None
        return str(model) if model else None
    return None


@dataclass(frozen=True)
class StoredResult:
    """What the store holds of one item, as the Batch output needs it."""

    key: str
    custom_id: str
    status: str
    output_text: str | None
    input_tokens: int | None
    output_tokens: int | None
    finish_reason: str | None
    model_version: str | None
    error_kind: str | None
    error_message: str | None


def batch_output_lines(results: Iterable[StoredResult]) -> Iterator[str]:
    """The OpenAI Batch output format: one JSON line per request, in plan order."""
    created = int(time.time())
    for r in results:
        if r.status == "succeeded":
            body = {
                "id": f"chatcmpl-{r.key}",
                "object": "chat.completion",
                "created": created,
                "model": r.model_version or "",
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": r.output_text or ""},
                        "finish_reason": r.finish_reason or "stop",
                        "logprobs": None,
                    }
                ],
                "usage": {
                    "prompt_tokens": r.input_tokens or 0,
                    "completion_tokens": r.output_tokens or 0,
                    "total_tokens": (r.input_tokens or 0) + (r.output_tokens or 0),
                },
            }
            response: dict[str, Any] | None = {
                "status_code": 200,
                "request_id": r.key,
                "body": body,
            }
            error = None
        else:
            response = None
            error = {"code": r.error_kind or r.status, "message": r.error_message or r.status}
        line = {
            "id": f"batch_req_{r.key}",
            "custom_id": r.custom_id,
            "response": response,
            "error": error,
        }
        yield json.dumps(line, ensure_ascii=False)
