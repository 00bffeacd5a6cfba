"""What crosses Redis between an owner and its workers, as JSON-able dicts: endpoint
configurations (never a key: only the variable's name), requests, answers and errors.

A request's deadline never crosses as a time: each machine has its own clock. The owner
sends the seconds left (REMAINING); the worker counts them from when it got the task.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from promptlab.errors import ErrorKind, ProviderError
from promptlab.providers.base import CompletionRequest, CompletionResponse, FinishReason
from promptlab.providers.batchconfig import BatchSettings
from promptlab.providers.config import EndpointConfig, ModelPrice


def endpoint_to_dict(cfg: EndpointConfig) -> dict[str, Any]:
    return dataclasses.asdict(cfg)


def endpoint_from_dict(data: dict[str, Any]) -> EndpointConfig:
    prices = {m: ModelPrice(**p) for m, p in (data.get("prices") or {}).items()}
    batch = BatchSettings(**data["batch"]) if data.get("batch") else BatchSettings()
    return EndpointConfig(**{**data, "prices": prices, "batch": batch})


def ticket_of(request: CompletionRequest) -> str:
    """What one send is claimed and answered by: the item (its run's own key) and the
    attempt, the same whoever sends it."""
    return f"{request.item_key or request.request_id}:{request.attempt}"


#: The key of a request's seconds left on the wire (not a CompletionRequest field).
REMAINING = "remaining_s"


#: The key of the run a request is for (its worker's log lines name it).
RUN_ID = "run_id"


def request_to_dict(
    request: CompletionRequest, remaining_s: float | None = None, run_id: str | None = None
) -> dict[str, Any]:
    data = dataclasses.asdict(request)
    data["messages"] = [dict(m) for m in request.messages]
    data["deadline"] = None  # another machine's clock would be compared with it
    if remaining_s is not None:
        data[REMAINING] = remaining_s
    if run_id is not None:
        data[RUN_ID] = run_id
    return data


def request_from_dict(data: dict[str, Any]) -> CompletionRequest:
    fields = {k: v for k, v in data.items() if k not in (REMAINING, RUN_ID)}
    return CompletionRequest(**{**fields, "messages": tuple(data["messages"]), "deadline": None})


def run_id_of(data: dict[str, Any]) -> str | None:
    """The run a request on the wire is for, when its owner said (a short text)."""
    value = data.get(RUN_ID)
    return value if isinstance(value, str) and 0 < len(value) <= 64 else None


def remaining_of(data: dict[str, Any]) -> float:
    """The seconds its owner still waits for a request (its whole timeout if unsaid)."""
    value = data.get(REMAINING)
    return float(value) if isinstance(value, int | float) else float(data.get("timeout_s", 60.0))


def answer_to_dict(
    response: CompletionResponse | None, error: ProviderError | None
) -> dict[str, Any]:
    """One send's outcome: the response, or the provider's error as it was raised."""
    if response is not None:
        return {"response": {**dataclasses.asdict(response), "headers": dict(response.headers)}}
    assert error is not None
    return {
        "error": {
            "kind": error.kind.value,
            "message": error.provider_message,
            "status": error.status,
            "provider": error.provider,
            "retry_after_s": error.retry_after_s,
            "should_retry": error.should_retry,
            "headers": dict(error.headers),
        }
    }


def answer_from_dict(data: dict[str, Any]) -> CompletionResponse | ProviderError:
    if "response" in data:
        fields = data["response"]
        return CompletionResponse(
            **{**fields, "finish_reason": FinishReason(fields["finish_reason"])}
        )
    e = data["error"]
    return ProviderError(
        ErrorKind(e["kind"]),
        e["message"],
        status=e["status"],
        provider=e["provider"],
        retry_after_s=e["retry_after_s"],
        should_retry=e["should_retry"],
        headers=e["headers"],
    )
