"""The gateway's answers in the caller's wire format: whole bodies, stream events, errors.

Whichever provider answered, the caller reads the format it sent: OpenAI's
`chat.completion` (streamed as `chat.completion.chunk` events ending `data: [DONE]`) or
Anthropic's `message` (streamed as message_start ... message_stop). Shapes follow what
the official SDKs parse, as fakellm's do (promptlab/fakellm/bodies.py), so an
application's client cannot tell the gateway from the provider.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from typing import Any

import orjson

from promptlab.gateway.calls import ANTHROPIC
from promptlab.providers.base import CompletionResponse
from promptlab.providers.wire import ANTHROPIC_STOP, OPENAI_FINISH

_ANTHROPIC_ERRORS = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    422: "invalid_request_error",
    429: "rate_limit_error",
    529: "overloaded_error",
}
_EMPTY_TEXT = {"type": "text", "text": ""}


class Reply(ABC):
    """One call's answer in one wire format; `call_id` names it to the caller."""

    media_type = "application/json"

    def __init__(self, call_id: str, model: str) -> None:
        self.call_id = call_id
        self.model = model
        self.created = int(time.time())

    @abstractmethod
    def whole(self, answer: CompletionResponse) -> bytes: ...

    @abstractmethod
    def head(self) -> bytes: ...

    @abstractmethod
    def piece(self, text: str) -> bytes: ...

    @abstractmethod
    def tail(self, answer: CompletionResponse, include_usage: bool) -> bytes: ...

    @staticmethod
    @abstractmethod
    def error(status: int, message: str, param: str | None = None) -> bytes: ...

    @abstractmethod
    def stream_error(self, status: int, message: str) -> bytes: ...


class OpenAIReply(Reply):
    def whole(self, answer: CompletionResponse) -> bytes:
        return orjson.dumps(
            {
                "id": self.call_id,
                "object": "chat.completion",
                "created": self.created,
                "model": self.model,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": answer.text, "refusal": None},
                        "logprobs": None,
                        "finish_reason": OPENAI_FINISH[answer.finish_reason],
                    }
                ],
                "usage": _openai_usage(answer),
            }
        )

    def _chunk(self, delta: dict[str, Any], reason: str | None) -> bytes:
        chunk = {
            "id": self.call_id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason}],
        }
        return b"data: " + orjson.dumps(chunk) + b"\n\n"

    def head(self) -> bytes:
        return self._chunk({"role": "assistant", "content": ""}, None)

    def piece(self, text: str) -> bytes:
        return self._chunk({"content": text}, None)

    def tail(self, answer: CompletionResponse, include_usage: bool) -> bytes:
        out = self._chunk({}, OPENAI_FINISH[answer.finish_reason])
        if include_usage:
            usage = {
                "id": self.call_id,
                "object": "chat.completion.chunk",
                "created": self.created,
                "model": self.model,
                "choices": [],
                "usage": _openai_usage(answer),
            }
            out += b"data: " + orjson.dumps(usage) + b"\n\n"
        return out + b"data: [DONE]\n\n"

    @staticmethod
    def error(status: int, message: str, param: str | None = None) -> bytes:
        kind = "invalid_request_error" if status < 500 else "api_error"
        return orjson.dumps({"error": {"message": message, "type": kind, "param": param}})

    def stream_error(self, status: int, message: str) -> bytes:
        return b"data: " + self.error(status, message) + b"\n\n"


class AnthropicReply(Reply):
    def whole(self, answer: CompletionResponse) -> bytes:
        return orjson.dumps(
            {
                "id": self.call_id,
                "type": "message",
                "role": "assistant",
                "model": self.model,
                "content": [{"type": "text", "text": answer.text}],
                "stop_reason": ANTHROPIC_STOP[answer.finish_reason],
                "stop_sequence": None,
                "usage": {
                    "input_tokens": answer.input_tokens,
                    "output_tokens": answer.output_tokens,
                },
            }
        )

    def head(self) -> bytes:
        start: dict[str, Any] = {
            "id": self.call_id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            # The input's count comes with the last event: an OpenAI-format provider
            # says it only at the end.
            "usage": {"input_tokens": 0, "output_tokens": 0},
        }
        block = {"type": "text", "text": ""}
        return _event("message_start", {"type": "message_start", "message": start}) + _event(
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": block},
        )

    def piece(self, text: str) -> bytes:
        delta = {"type": "text_delta", "text": text}
        return _event(
            "content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}
        )

    def tail(self, answer: CompletionResponse, include_usage: bool) -> bytes:
        delta = {"stop_reason": ANTHROPIC_STOP[answer.finish_reason], "stop_sequence": None}
        usage = {"input_tokens": answer.input_tokens, "output_tokens": answer.output_tokens}
        return (
            _event("content_block_stop", {"type": "content_block_stop", "index": 0})
            + _event("message_delta", {"type": "message_delta", "delta": delta, "usage": usage})
            + _event("message_stop", {"type": "message_stop"})
        )

    @staticmethod
    def error(status: int, message: str, param: str | None = None) -> bytes:
        kind = _ANTHROPIC_ERRORS.get(status, "api_error")
        return orjson.dumps({"type": "error", "error": {"type": kind, "message": message}})

    def stream_error(self, status: int, message: str) -> bytes:
        return _event("error", orjson.loads(self.error(status, message)))


def reply_for(wire: str, call_id: str, model: str) -> Reply:
    return AnthropicReply(call_id, model) if wire == ANTHROPIC else OpenAIReply(call_id, model)


def error_body(wire: str, status: int, message: str, param: str | None = None) -> bytes:
    """A refusal in the caller's error envelope (its SDK raises it with this message)."""
    cls = AnthropicReply if wire == ANTHROPIC else OpenAIReply
    return cls.error(status, message, param)


def _openai_usage(answer: CompletionResponse) -> dict[str, int]:
    return {
        "prompt_tokens": answer.input_tokens,
        "completion_tokens": answer.output_tokens,
        "total_tokens": answer.input_tokens + answer.output_tokens,
    }


def _event(name: str, data: dict[str, Any]) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"
