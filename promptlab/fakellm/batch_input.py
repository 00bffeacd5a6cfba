"""fakellm's batch inputs checked as the providers check them: an OpenAI batch file (each
refused line becomes an entry of the batch's `errors`, the batch fails) and an Anthropic
`requests` list (the first refused request is a 400 naming its index).

Each request body goes through the live endpoint's own checks (fakellm/wire.py), so a body
the chat route would refuse is refused here too.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from promptlab.fakellm import wire
from promptlab.fakellm.batches import Line

#: The one endpoint fakellm batches: the chat route it serves live.
OPENAI_ENDPOINT = "/v1/chat/completions"
#: Anthropic's custom_id rule.
CUSTOM_ID = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
#: A batch input's error list stops here (enough to fix a file, bounded).
MAX_ERRORS = 1000


def _error(
    code: str, message: str, line: int | None = None, param: str | None = None
) -> dict[str, Any]:
    return {"code": code, "message": message, "param": param, "line": line}


#: Fields of OpenAI's batch create body.
BATCH_FIELDS = frozenset(
    {"input_file_id", "endpoint", "completion_window", "metadata", "output_expires_after"}
)


def openai_create_refusal(body: Any) -> tuple[str, str, str] | None:
    """(message, code, param) of what the batch create body gets wrong, or None."""
    if not isinstance(body, dict):
        return "The body must be a JSON object.", "invalid_type", "body"
    unknown = sorted(set(body) - BATCH_FIELDS)
    if unknown:
        return (
            f"Unrecognized request argument supplied: {unknown[0]}",
            "unknown_parameter",
            unknown[0],
        )
    for name in ("input_file_id", "endpoint", "completion_window"):
        if not isinstance(body.get(name), str):
            return f"Missing required parameter: '{name}'.", "missing_required_parameter", name
    if body["endpoint"] != OPENAI_ENDPOINT:
        return (
            f"Invalid value: '{body['endpoint']}'. fakellm batches only '{OPENAI_ENDPOINT}'.",
            "invalid_value",
            "endpoint",
        )
    if body["completion_window"] != "24h":
        return (
            f"Invalid value: '{body['completion_window']}'. Supported values are: '24h'.",
            "invalid_value",
            "completion_window",
        )
    metadata = body.get("metadata")
    if metadata is not None and not (
        isinstance(metadata, dict)
        and len(metadata) <= 16
        and all(isinstance(k, str) and len(k) <= 64 for k in metadata)
        and all(isinstance(v, str) and len(v) <= 512 for v in metadata.values())
    ):
        return (
            "Invalid 'metadata': at most 16 pairs, keys of at most 64 characters and "
            "string values of at most 512.",
            "invalid_value",
            "metadata",
        )
    return None


def openai_file(
    data: bytes, size: int, max_requests: int, max_bytes: int
) -> tuple[list[Line], list[dict[str, Any]]]:
    """(the lines, []) of an acceptable batch file, or ([], the errors that fail it)."""
    if size > max_bytes:
        message = f"The batch input file is {size} bytes; the maximum is {max_bytes} bytes."
        return [], [_error("file_too_large", message)]
    rows = data.splitlines()
    while rows and not rows[-1].strip():
        rows.pop()
    if not rows:
        return [], [_error("empty_file", "The batch input file is empty.")]
    if len(rows) > max_requests:
        message = f"The batch input file has {len(rows)} requests; the maximum is {max_requests}."
        return [], [_error("too_many_requests", message)]
    lines: list[Line] = []
    errors: list[dict[str, Any]] = []
    seen: set[str] = set()
    models: set[str] = set()
    for number, raw in enumerate(rows, 1):
        try:
            line = _openai_line(raw, number, seen, models)
        except _LineError as exc:
            if len(errors) < MAX_ERRORS:
                errors.append(exc.entry)
            continue
        lines.append(line)
    return ([], errors) if errors else (lines, [])


class _LineError(Exception):
    def __init__(self, entry: dict[str, Any]) -> None:
        super().__init__(entry["message"])
        self.entry = entry


def _openai_line(raw: bytes, number: int, seen: set[str], models: set[str]) -> Line:
    """One line of the file, checked: shape, url, method, unique custom_id, one model, body."""

    def refuse(code: str, message: str, param: str | None = None) -> _LineError:
        return _LineError(_error(code, message, number, param))

    try:
        row = json.loads(raw)
    except ValueError:
        row = None
    if not isinstance(row, Mapping):
        raise refuse("invalid_json_line", "This line is not parseable as valid JSON.")
    custom_id, body = row.get("custom_id"), row.get("body")
    if not isinstance(custom_id, str) or not custom_id:
        raise refuse(
            "missing_required_parameter", "Missing required parameter: 'custom_id'.", "custom_id"
        )
    if row.get("method") != "POST":
        raise refuse(
            "invalid_method",
            "The method for this request is not supported; only POST is supported.",
            "method",
        )
    if row.get("url") != OPENAI_ENDPOINT:
        raise refuse(
            "invalid_url",
            "The URL provided for this request does not match the "
            f"batch endpoint {OPENAI_ENDPOINT}.",
            "url",
        )
    if custom_id in seen:
        raise refuse(
            "duplicate_custom_id",
            "The custom_id for this request is a duplicate of "
            "another request. The custom_id parameter must be unique for each request "
            "in a batch.",
            "custom_id",
        )
    seen.add(custom_id)
    if not isinstance(body, Mapping):
        raise refuse("missing_required_parameter", "Missing required parameter: 'body'.", "body")
    if body.get("stream"):
        raise refuse("invalid_value", "Streaming is not supported in a batch.", "body.stream")
    try:
        parsed = wire.parse_openai(body, None)
    except wire.WireError as exc:
        param = f"body.{exc.param}" if exc.param else None
        raise refuse(exc.code or "invalid_request", str(exc), param) from None
    model = parsed.completion.model
    if models and model not in models:
        raise refuse(
            "mismatched_model",
            "The provided model does not match the model of other "
            "requests in the batch; a batch file holds requests to one model.",
            "body.model",
        )
    models.add(model)
    return Line(custom_id, parsed.completion)


#: The fields a Message Batches create body takes (and those of each request).
_BATCH_FIELDS = frozenset({"requests"})
_REQUEST_FIELDS = frozenset({"custom_id", "params"})


def anthropic_requests(body: Any, version: str | None, max_requests: int) -> list[Line]:
    """The lines of a Message Batches create body; a WireError (a 400 naming the request's
    index, in the API's validation wording) for the first request refused."""
    if version is not None and version not in wire.ANTHROPIC_VERSIONS:
        raise wire.WireError(f"anthropic-version: invalid version {version!r}")
    if not isinstance(body, Mapping) or "requests" not in body:
        raise wire.WireError("requests: Field required")
    unknown = sorted(set(body) - _BATCH_FIELDS)
    if unknown:
        raise wire.WireError(f"{unknown[0]}: Extra inputs are not permitted")
    requests = body["requests"]
    if not isinstance(requests, list):
        raise wire.WireError("requests: Input should be a valid list")
    if not 1 <= len(requests) <= max_requests:
        bound = "at least 1 item" if not requests else f"at most {max_requests} items"
        raise wire.WireError(
            f"requests: List should have {bound} after validation, not {len(requests)}"
        )
    lines: list[Line] = []
    seen: dict[str, int] = {}
    for index, item in enumerate(requests):
        line = _anthropic_request(item, f"requests.{index}", version)
        if line.custom_id in seen:
            raise wire.WireError(
                f"requests.{index}.custom_id: custom_id {line.custom_id!r} is already used by "
                f"requests.{seen[line.custom_id]}; each custom_id must be unique in a batch"
            )
        seen[line.custom_id] = index
        lines.append(line)
    return lines


def _anthropic_request(item: Any, where: str, version: str | None) -> Line:
    if not isinstance(item, Mapping):
        raise wire.WireError(f"{where}: Input should be a valid dictionary")
    unknown = sorted(set(item) - _REQUEST_FIELDS)
    if unknown:
        raise wire.WireError(f"{where}.{unknown[0]}: Extra inputs are not permitted")
    for name in ("custom_id", "params"):
        if name not in item:
            raise wire.WireError(f"{where}.{name}: Field required")
    custom_id, params = item["custom_id"], item["params"]
    if not isinstance(custom_id, str) or not CUSTOM_ID.match(custom_id):
        raise wire.WireError(
            f"{where}.custom_id: String should match pattern '{CUSTOM_ID.pattern}'"
        )
    if isinstance(params, Mapping) and params.get("stream"):
        raise wire.WireError(f"{where}.params.stream: streaming is not supported in a batch")
    try:
        parsed = wire.parse_anthropic(params, None, version)
    except wire.WireError as exc:
        raise wire.WireError(f"{where}.params.{exc}") from None
    return Line(custom_id, parsed.completion)
