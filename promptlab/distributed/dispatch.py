"""The owner's side: an endpoint whose sends go to Celery workers, chunk by chunk.

To the engine a distributed endpoint is one more `Provider` (`WorkerProvider`): the
engine still plans, renders, retries, limits its own dispatch and records every answer
through its one writer; only the call itself happens on a worker. Requests to one
endpoint are gathered into chunks (up to CHUNK_ITEMS, or what came within LINGER_S)
and sent as one task each; every answer comes back on its own, as soon as it is known,
on this owner's Redis list, read by one thread that wakes the waiting request.

Only an answer whose MAC verifies for its ticket is taken in (trust.open_reply): a
forged, replayed or cut-short line is dropped, logged once per claimed sender and
counted (`Dispatch.dropped`), and the request goes on waiting for its real answer.
Each answer names the worker that sent it; the engine keeps that in the audit. A
ticket the owner stops waiting for is stored as answered (`_abandon`), so no later
delivery of its task pays for it again.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

from promptlab.audit.logjson import current_log_context
from promptlab.distributed import settings as keys
from promptlab.distributed.app import SEND_CHUNK, make_app
from promptlab.distributed.trust import (
    Refused,
    endpoint_ref,
    open_reply,
    sealed_answer,
    sender_of,
    signed_task,
    worker_secret,
)
from promptlab.distributed.wire import (
    answer_from_dict,
    answer_to_dict,
    request_to_dict,
    ticket_of,
)
from promptlab.errors import ErrorKind, ProviderError
from promptlab.providers.base import CompletionRequest, CompletionResponse
from promptlab.providers.config import EndpointConfig

log = logging.getLogger(__name__)

#: Most requests one task carries.
CHUNK_ITEMS = 20
#: Seconds a chunk waits for more requests before it is sent anyway.
LINGER_S = 0.005
#: Claimed senders of dropped answers logged (each once); past it, drops are only counted.
MAX_LOGGED_SENDERS = 100
#: Seconds the reply reader blocks on Redis before it looks whether it should stop.
READ_BLOCK_S = 1
#: Seconds between two looks at this owner's marker key (gone: Redis lost its data).
MARKER_EVERY_S = 1.0
MARKER_TTL_S = 60


@dataclass
class _Sent:
    """A ticket on its way: what republishing it needs, and when its owner gives up."""

    queue: str
    endpoint: dict[str, Any]
    request: CompletionRequest
    expires: float  # time.monotonic()
    run_id: str | None = None  # the run it is for, as the engine's log context names it


class Dispatch:
    """One owner's link to the workers (one per engine): chunks out, answers back."""

    def __init__(self, url: str | None = None) -> None:
        import redis

        self.url = url or keys.broker_url()
        # Before anything is sent: a broker off loopback without a shared secret is refused.
        self._secret = worker_secret(self.url)
        self.owner = uuid.uuid4().hex
        self.app = make_app(self.url)
        self._redis = redis.Redis.from_url(self.url, decode_responses=True)
        self._waiting: dict[str, asyncio.Future[tuple[dict[str, Any], str | None]]] = {}
        #: Reply lines dropped because they did not verify, and the senders they named
        #: (each logged once: a flood of forgeries is one line per claimed sender).
        self.dropped = 0
        self._dropped_from: set[str] = set()
        #: Tickets not answered yet (read by the reply thread when Redis lost them).
        self._sent: dict[str, _Sent] = {}
        self._sent_lock = threading.Lock()
        self._chunks: dict[str, list[str]] = {}
        #: Chunks published that no worker has answered a ticket of yet, by id: their
        #: queue, when they went (time.monotonic) and their tickets still waited for.
        self._queued: dict[int, tuple[str, float, set[str]]] = {}
        self._chunk_of: dict[str, int] = {}
        self._chunk_ids = itertools.count()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop = threading.Event()
        self._reader: threading.Thread | None = None
        self._marker_at = 0.0
        self._marker_set = False
        #: Marks tickets given up on (a blocking Redis call: off the engine's loop, and
        #: each one done before close() closes the connection).
        self._abandons = ThreadPoolExecutor(max_workers=1, thread_name_prefix="abandon")

    async def complete(self, cfg: EndpointConfig, request: CompletionRequest) -> CompletionResponse:
        """Send `request` through a worker; its answer, or its ProviderError raised."""
        self._start_reader()
        ticket = ticket_of(request)
        if ticket in self._waiting:  # the engine sends one attempt once; never two waiters
            raise RuntimeError(f"ticket {ticket} is already waiting for its answer")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[tuple[dict[str, Any], str | None]] = loop.create_future()
        self._waiting[ticket] = future
        # The engine waits timeout_s (and a second) for the whole call; the worker is
        # told the seconds left when the chunk goes, never this machine's clock.
        sent = _Sent(
            cfg.queue or keys.DEFAULT_QUEUE,
            endpoint_ref(cfg),
            request,
            time.monotonic() + request.timeout_s,
            current_log_context().get("run_id"),
        )
        with self._sent_lock:
            self._sent[ticket] = sent
        try:
            self._add(sent, ticket)
            answer, worker = await future
        finally:
            if self._waiting.get(ticket) is future:
                del self._waiting[ticket]
            with self._sent_lock:
                self._sent.pop(ticket, None)
                self._unqueue(ticket, whole_chunk=False)
            # Given up on (timed out, cancelled: the wait cancels the future): never sent later.
            if (future.cancelled() or not future.done()) and not self._stop.is_set():
                self._abandons.submit(self._abandon, ticket)
        if "internal" in answer:
            raise RuntimeError(f"the worker's adapter failed: {answer['internal']}")
        result = answer_from_dict(answer)
        if isinstance(result, ProviderError):
            result.served_by = worker
            raise result
        return replace(result, served_by=worker)

    def _abandon(self, ticket: str) -> None:
        """Store an answer for a ticket this owner stopped waiting for (its attempt then
        retried as the next one, or its run ended), unless one is stored: a delivery of
        its task later (the broker redelivering a killed worker's task minutes after)
        finds it answered and sends nothing, where it would pay for the call again."""
        error = ProviderError(
            ErrorKind.TIMEOUT,
            "its owner stopped waiting for it: not sent again",
            provider=None,
        )
        sealed = sealed_answer(
            self._secret, ticket, f"owner:{self.owner}", answer_to_dict(None, error)
        )
        try:
            self._redis.set(keys.answer_key(ticket), sealed, nx=True, ex=keys.ANSWER_TTL_S)
        except Exception as exc:  # noqa: BLE001 - Redis away: the claim's TTL still holds
            log.warning("could not mark ticket %s as given up: %s", ticket, exc)

    def close(self) -> None:
        """Stop reading answers; every ticket still waited for is given up on here (its
        waits end as the engine's loop stops, after this), so no later delivery of its
        task pays for it; then the link closes."""
        self._stop.set()
        if self._reader is not None:
            self._reader.join(timeout=READ_BLOCK_S + 5)
        for ticket in list(self._waiting):
            self._abandons.submit(self._abandon, ticket)
        self._abandons.shutdown(wait=True)
        self._redis.close()

    # ---- chunks out ----------------------------------------------------------------

    def _add(self, sent: _Sent, ticket: str) -> None:
        lane = json.dumps([sent.queue, sent.endpoint], sort_keys=True)
        if lane not in self._chunks:
            self._chunks[lane] = []
            asyncio.get_running_loop().call_later(LINGER_S, self._send, lane)
        chunk = self._chunks[lane]
        chunk.append(ticket)
        if len(chunk) >= CHUNK_ITEMS:
            self._send(lane)

    def _send(self, lane: str) -> None:
        tickets = self._chunks.pop(lane, None)
        if tickets is None:
            return  # sent already when it filled up
        # Publishing is a blocking Redis call: off the engine's loop.
        asyncio.get_running_loop().run_in_executor(None, self._publish, tickets)

    def _publish(self, tickets: list[str]) -> None:
        """One signed task for tickets of one lane, each with its seconds left now."""
        with self._sent_lock:
            sent = [(t, self._sent[t]) for t in tickets if t in self._sent]
        if not sent:
            return  # given up on meanwhile
        now = time.monotonic()
        first = sent[0][1]
        requests = [
            request_to_dict(s.request, max(0.0, s.expires - now), s.run_id) for _, s in sent
        ]
        try:
            args, kwargs = signed_task(self._secret, self.owner, first.endpoint, requests)
            self.app.send_task(SEND_CHUNK, args=args, kwargs=kwargs, queue=first.queue)
            self._queue(first.queue, [ticket for ticket, _ in sent])
        except Exception as exc:  # noqa: BLE001 - the broker is gone: each request fails
            log.error("could not send a chunk to the workers: %s", exc)
            for ticket, _ in sent:
                message = f"the broker at {self.url} did not take the chunk: {exc}"
                error = ProviderError(
                    ErrorKind.CONNECTION,
                    message,
                    provider=first.endpoint["name"],
                    should_retry=True,
                )
                self._answer(ticket, answer_to_dict(None, error))

    def _queue(self, queue: str, tickets: list[str]) -> None:
        with self._sent_lock:
            chunk = next(self._chunk_ids)
            self._queued[chunk] = (queue, time.monotonic(), set(tickets))
            for ticket in tickets:
                self._unqueue(ticket, whole_chunk=False)  # sent again: its old chunk's no more
                self._chunk_of[ticket] = chunk

    def _unqueue(self, ticket: str, *, whole_chunk: bool) -> None:
        """A ticket answered (a worker holds its chunk: the whole chunk is taken), or
        given up on (its chunk waits on for the others). Called under _sent_lock."""
        chunk = self._chunk_of.pop(ticket, None)
        if chunk is None or chunk not in self._queued:
            return
        tickets = self._queued[chunk][2]
        tickets.discard(ticket)
        if whole_chunk or not tickets:
            for other in tickets:
                self._chunk_of.pop(other, None)
            del self._queued[chunk]

    def oldest_waiting(self) -> dict[str, float]:
        """Per queue, seconds since this owner's oldest chunk went that no worker has
        answered a ticket of yet (fleet.py; the stalled-queue alert)."""
        now, oldest = time.monotonic(), dict[str, float]()
        with self._sent_lock:
            for queue, sent_at, _tickets in self._queued.values():
                oldest[queue] = max(oldest.get(queue, 0.0), now - sent_at)
        return oldest

    def _republish_all(self) -> None:
        """Redis lost its data (restarted empty): the chunks queued, the claims and the
        answers not yet read are gone. Every ticket still waited for goes again; what a
        worker was sending meanwhile may be sent twice, nothing more."""
        with self._sent_lock:
            lanes: dict[str, list[str]] = {}
            for ticket, sent in self._sent.items():
                lane = json.dumps([sent.queue, sent.endpoint], sort_keys=True)
                lanes.setdefault(lane, []).append(ticket)
        log.warning(
            "the broker lost its data: sending %d tickets again", sum(map(len, lanes.values()))
        )
        for tickets in lanes.values():
            for at in range(0, len(tickets), CHUNK_ITEMS):
                self._publish(tickets[at : at + CHUNK_ITEMS])

    # ---- answers back --------------------------------------------------------------

    def _start_reader(self) -> None:
        if self._reader is None:
            self._loop = asyncio.get_running_loop()
            self._reader = threading.Thread(target=self._read, daemon=True, name="replies")
            self._reader.start()

    def _read(self) -> None:
        replies = keys.replies_key(self.owner)
        while not self._stop.is_set():
            try:
                self._check_marker()
                popped = self._redis.blpop([replies], timeout=READ_BLOCK_S)
            except Exception as exc:  # noqa: BLE001 - Redis went away: try again shortly
                log.warning("reading answers from Redis failed: %s", exc)
                self._stop.wait(READ_BLOCK_S)
                continue
            if popped:
                self._take(str(popped[1]))

    def _take(self, line: str) -> None:
        """A reply line in: its answer to the waiting request, if it verifies."""
        try:
            reply = open_reply(self._secret, line)
        except Refused as exc:
            self.dropped += 1
            sender = sender_of(line)
            # Names are the forger's choice: the first MAX_LOGGED_SENDERS are logged.
            if sender not in self._dropped_from and len(self._dropped_from) < MAX_LOGGED_SENDERS:
                self._dropped_from.add(sender)
                log.error("dropped an answer said to be from worker %s: %s", sender, exc)
            return
        with self._sent_lock:
            self._unqueue(reply.ticket, whole_chunk=True)
        self._answer(reply.ticket, reply.answer, reply.worker)

    def _check_marker(self) -> None:
        """Keep a key of this owner's in Redis; found gone, Redis lost what it held (a
        restart without persistence), and what this owner waits for is sent again."""
        now = time.monotonic()
        if now - self._marker_at < MARKER_EVERY_S:
            return
        self._marker_at = now
        before = self._redis.set(keys.owner_key(self.owner), "1", ex=MARKER_TTL_S, get=True)
        if before is None and self._marker_set:
            self._republish_all()
        self._marker_set = True

    def _answer(self, ticket: str, answer: dict[str, Any], worker: str | None = None) -> None:
        assert self._loop is not None
        self._loop.call_soon_threadsafe(self._resolve, ticket, answer, worker)

    def _resolve(self, ticket: str, answer: dict[str, Any], worker: str | None) -> None:
        future = self._waiting.get(ticket)
        if future is not None and not future.done():  # else: given up on (timed out)
            future.set_result((answer, worker))


class WorkerProvider:
    """A Provider whose calls are made by Celery workers (the endpoint's `executor`)."""

    supports_json_schema = True

    def __init__(self, cfg: EndpointConfig, dispatch: Dispatch) -> None:
        self.cfg = cfg
        self.name = cfg.name
        self.kind = cfg.kind
        self._dispatch = dispatch

    async def complete(self, request: CompletionRequest) -> CompletionResponse:
        return await self._dispatch.complete(self.cfg, request)

    async def aclose(self) -> None:
        return None
