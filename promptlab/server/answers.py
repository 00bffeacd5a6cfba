"""What the API's routes answer with: JSON, one-line refusals, and answers by idempotency key."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import threading
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any, Generic, TypeVar

import orjson
from fastapi import Response

from promptlab.server.refusals import Refused
from promptlab.store.idempotency import IdempotencyKeys

T = TypeVar("T")

#: Submits remembered by idempotency key, so a client's retry does not start a second run.
IDEMPOTENCY_KEYS = 10_000


def json_response(data: Any, status: int = 200) -> Response:
    """`data` (dataclasses, datetimes, numpy numbers included) as JSON; NaN becomes null,
    as JSON has no NaN (a metric with no value, say)."""
    try:
        body = orjson.dumps(
            data, default=_other, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS
        )
    except orjson.JSONEncodeError:
        # An integer past 64 bits (a schema's `maximum: 1e26` written out): slower, exact.
        body = json.dumps(_plain(data), default=str).encode()
    return Response(body, status_code=status, media_type="application/json")


def _plain(value: Any) -> Any:
    """`value` as the standard library's json takes it (dataclasses as dicts)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _plain(dataclasses.asdict(value))
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, float) and value != value:
        return None
    return value


def _other(value: Any) -> Any:
    if isinstance(value, Path | set | frozenset):
        return str(value) if isinstance(value, Path) else sorted(value, key=str)
    if hasattr(value, "item"):  # a numpy scalar orjson does not know
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON")


class Submits(Generic[T]):
    """Answers by idempotency key: a submit or command retried after a timeout (or a
    dropped connection, or a server restart) gets the first answer, and nothing runs
    twice.

    A key is its caller's and its route's (Bob's key never finds Alice's answer) and is
    bound to the body it came with: the same key with another body is refused, as
    payment APIs do, rather than answered with what was asked before. Calls wait only
    for a call with the same key (a lock per key): submits with other keys go on in
    parallel. With `typ` and `keys`, answers are kept in the database
    (store/idempotency.py), so a retry after a restart finds them; without, in memory
    (a job's answer names a job a restart forgets anyway).
    """

    def __init__(self, typ: Any = None, keys: IdempotencyKeys | None = None) -> None:
        self._typ = typ
        self._keys = keys if typ is not None else None
        self._lock = threading.Lock()
        self._locks: weakref.WeakValueDictionary[tuple[str, str, str], Any] = (
            weakref.WeakValueDictionary()
        )
        self._answers: dict[tuple[str, str, str], tuple[str, T]] = {}

    def once(
        self, key: str | None, start: Callable[[], T], *, caller: str, route: str, body: str
    ) -> T:
        if key is None:
            return start()
        scoped = (caller, route, key)
        digest = hashlib.sha256(body.encode()).hexdigest()
        with self._key_lock(scoped):  # one call per key at a time; a retry waits for it
            held = self._held(scoped)
            if held is None:
                held = (digest, start())
                self._keep(scoped, held)
            elif held[0] != digest:
                raise Refused(
                    422,
                    f"Idempotency-Key {key[:80]!r} was sent with another body to {route}; "
                    "a new request needs a new key",
                )
            return held[1]

    def _key_lock(self, scoped: tuple[str, str, str]) -> Any:
        with self._lock:
            lock = self._locks.get(scoped)
            if lock is None:
                lock = self._locks[scoped] = threading.Lock()
            return lock

    def _held(self, scoped: tuple[str, str, str]) -> tuple[str, T] | None:
        with self._lock:
            held = self._answers.get(scoped)
        if held is not None or self._keys is None:
            return held
        kept = self._keys.find(*scoped)
        if kept is None:
            return None
        from promptlab.server.typed import from_wire

        return kept[0], from_wire(self._typ, json.loads(kept[1]))

    def _keep(self, scoped: tuple[str, str, str], held: tuple[str, T]) -> None:
        with self._lock:
            if len(self._answers) >= IDEMPOTENCY_KEYS:
                self._answers.pop(next(iter(self._answers)))
            self._answers[scoped] = held
        if self._keys is not None:
            from promptlab.server.typed import to_wire

            self._keys.keep(*scoped, held[0], to_wire(self._typ, held[1]).decode())


def typed_response(typ: Any, value: Any, status: int = 200) -> Response:
    """`value`, a `typ` record, as JSON the CLI decodes into the same record (typed.py)."""
    from promptlab.server.typed import to_wire

    return Response(to_wire(typ, value), status_code=status, media_type="application/json")


def request_once(
    submits: Submits[T], request: Any, key: str | None, body: str, start: Callable[[], T]
) -> T:
    """`start()` once per caller, route and key of `request` (Submits), bound to `body`."""
    from promptlab.server.principals import principal_of

    route = f"{request.method} {request.url.path}"
    caller = principal_of(request.scope).token_id
    return submits.once(key, start, caller=caller, route=route, body=body)


def upload_once(
    submits: Submits[T], request: Any, key: str | None, path: Path, start: Callable[[], T]
) -> T:
    """`start()` once per caller, route and key for an uploaded file at `path`, bound to
    the file's SHA-256 and the request's query (its options)."""
    if key is None:
        return start()
    with path.open("rb") as received:
        digest = hashlib.file_digest(received, "sha256").hexdigest()
    return request_once(submits, request, key, f"{request.url.query}\n{digest}", start)
