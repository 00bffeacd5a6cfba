"""What fakellm writes back, in OpenAI and Anthropic format: success bodies, SSE streams,
error envelopes and rate-limit headers.

Shapes follow what the official SDKs parse (strict response validation included); error
bodies and rate-limit headers copy what the real APIs send.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from promptlab.providers.base import FinishReason
from promptlab.providers.wire import ANTHROPIC_STOP, OPENAI_FINISH

#: Words per streamed chunk: real servers send a token or a few at a time.
WORDS_PER_CHUNK = 4


def dumps(data: Any) -> bytes:
    """Compact JSON bytes."""
    return json.dumps(data, separators=(",", ":")).encode()


# --- success bodies ----------------------------------------------------------------------


def openai_completion(
    response_id: str,
    model: str,
    text: str,
    finish: FinishReason,
    usage: tuple[int, int],
    logprobs: list[list[float]] | None = None,
) -> bytes:
    """A `chat.completion` object; with `logprobs` (the top log-probabilities of each
    output token), its `choices[0].logprobs.content`."""
    prompt, completion = usage
    return dumps(
        {
            "id": response_id,
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text, "refusal": None},
                    "logprobs": None
                    if logprobs is None
                    else {
                        "content": [_token_logprobs(i, top) for i, top in enumerate(logprobs)],
                        "refusal": None,
                    },
                    "finish_reason": OPENAI_FINISH[finish],
                }
            ],
            "usage": {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
            },
            "system_fingerprint": "fp_fakellm",
        }
    )


def _token_logprobs(position: int, top: list[float]) -> dict[str, Any]:
    alternatives = [
        {"token": f"t{position}.{j}", "logprob": lp, "bytes": None} for j, lp in enumerate(top)
    ]
    return {**alternatives[0], "top_logprobs": alternatives}


def anthropic_message(
    response_id: str, model: str, text: str, finish: FinishReason, usage: tuple[int, int]
) -> bytes:
    """A Messages API `message` object."""
    return dumps(
        {
            "id": response_id,
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [{"type": "text", "text": text}],
            "stop_reason": ANTHROPIC_STOP[finish],
            "stop_sequence": None,
            "usage": {"input_tokens": usage[0], "output_tokens": usage[1]},
        }
    )


def chunks_of(text: str) -> list[str]:
    """The text split into stream deltas that join back to exactly the text."""
    words = text.split(" ")
    return [
        " ".join(words[i : i + WORDS_PER_CHUNK]) + (" " if i + WORDS_PER_CHUNK < len(words) else "")
        for i in range(0, len(words), WORDS_PER_CHUNK)
    ]


def openai_stream(
    response_id: str,
    model: str,
    text: str,
    finish: FinishReason,
    usage: tuple[int, int],
    include_usage: bool,
) -> Iterator[bytes]:
    """The SSE events of a streamed chat completion, `data: [DONE]` last."""
    created = int(time.time())

    def event(delta: Mapping[str, Any], reason: str | None) -> bytes:
        chunk: dict[str, Any] = {
            "id": response_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "system_fingerprint": "fp_fakellm",
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason}],
        }
        if include_usage:
            chunk["usage"] = None
        return b"data: " + dumps(chunk) + b"\n\n"

    yield event({"role": "assistant", "content": "", "refusal": None}, None)
    for piece in chunks_of(text):
        yield event({"content": piece}, None)
    yield event({}, OPENAI_FINISH[finish])
    if include_usage:
        final = {
            "id": response_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "system_fingerprint": "fp_fakellm",
            "choices": [],
            "usage": {
                "prompt_tokens": usage[0],
                "completion_tokens": usage[1],
                "total_tokens": usage[0] + usage[1],
            },
        }
        yield b"data: " + dumps(final) + b"\n\n"
    yield b"data: [DONE]\n\n"


def _sse(name: str, data: Mapping[str, Any]) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + dumps(data) + b"\n\n"


def anthropic_stream(
    response_id: str, model: str, text: str, finish: FinishReason, usage: tuple[int, int]
) -> Iterator[bytes]:
    """The SSE events of a streamed message, `message_stop` last."""
    start: dict[str, Any] = {
        "id": response_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": usage[0], "output_tokens": 1},
    }
    yield _sse("message_start", {"type": "message_start", "message": start})
    yield _sse(
        "content_block_start",
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    )
    yield _sse("ping", {"type": "ping"})
    for piece in chunks_of(text):
        delta = {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "text_delta", "text": piece},
        }
        yield _sse("content_block_delta", delta)
    yield _sse("content_block_stop", {"type": "content_block_stop", "index": 0})
    yield _sse(
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": ANTHROPIC_STOP[finish], "stop_sequence": None},
            "usage": {"output_tokens": usage[1]},
        },
    )
    yield _sse("message_stop", {"type": "message_stop"})


# --- error bodies -----------------------------------------------------------------------

_ANTHROPIC_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}


def openai_error(message: str, err_type: str, code: str | None, param: str | None = None) -> bytes:
    """OpenAI's error envelope."""
    return dumps({"error": {"message": message, "type": err_type, "param": param, "code": code}})


def anthropic_error(status: int, message: str, request_id: str) -> bytes:
    """Anthropic's error envelope."""
    err_type = _ANTHROPIC_ERROR_TYPES.get(status, "api_error")
    return dumps(
        {"type": "error", "error": {"type": err_type, "message": message}, "request_id": request_id}
    )


# --- rate-limit headers -----------------------------------------------------------------


def openai_duration(seconds: float) -> str:
    """OpenAI's reset format: `120ms`, `1.5s`, `6m0s`."""
    if seconds < 1:
        return f"{max(0, math.ceil(seconds * 1000))}ms"
    if seconds < 60:
        return f"{seconds:.3g}s"
    minutes, rest = divmod(seconds, 60)
    return f"{int(minutes)}m{rest:.0f}s"


def anthropic_reset(seconds: float, now: datetime | None = None) -> str:
    """Anthropic's reset format: an RFC 3339 UTC timestamp, `seconds` after `now`."""
    when = (now or datetime.now(UTC)) + timedelta(seconds=max(0.0, seconds))
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def retry_headers(seconds: float) -> dict[str, str]:
    """`retry-after` (whole seconds, rounded up) and the precise `retry-after-ms`."""
    return {
        "retry-after": str(max(1, math.ceil(seconds))),
        "retry-after-ms": str(max(1, math.ceil(seconds * 1000))),
    }
