"""The provider-batch executor as a Provider: `complete` puts the request in its run's
chunk and waits for its line's answer, so the engine's run model (items, attempts,
retries, results, traces, costs, the audit chain) is the same as for live calls.

A chunk is sent as one batch when it is full (the provider's requests and bytes per
batch) or when no request has come for `linger_s`. It is written down (the ledger) before
its submit and its batch id as soon as the provider gives it, so a process that dies
while its batches run polls them again on a resume: an item whose line is in a chunk
not yet handed over waits for that line, and is never sent in a second chunk.

Policies (docs/how-to/provider-batches.md): a line the batch never reached (expired,
cancelled) and a line that failed inside the batch come back as that attempt's error,
so the run's retry policy sends them again, in a new batch; a batch refused as a whole
fails its lines with the provider's reasons, naming the lines.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace

from promptlab.errors import ProviderError
from promptlab.providers.base import CompletionRequest, CompletionResponse
from promptlab.providers.batches.clients import BatchClient, Line, Outcome, RemoteBatch
from promptlab.providers.batches.ledger import BatchLedger, ChunkRecord
from promptlab.providers.batches.polling import Poller
from promptlab.providers.config import EndpointConfig

log = logging.getLogger(__name__)

#: A chunk waits at most this many `linger_s` after its first line before it is sent.
LINGER_CAP = 20
#: What a line's JSON holds besides its messages' text (keys, model, parameters).
LINE_OVERHEAD = 400
#: Of a batch's byte limit, what a chunk fills (the size of a line is estimated).
BYTES_MARGIN = 0.95


@dataclass
class Chunk:
    """A chunk from its first line to its last answer handed over."""

    chunk_id: str
    run_id: str
    #: One model per chunk: OpenAI refuses a batch file that names two.
    model: str = ""
    lines: dict[str, Line | None] = field(default_factory=dict)
    size: int = 0
    first_at: float = 0.0
    timer: asyncio.TimerHandle | None = None
    remote: RemoteBatch | None = None
    submitted_at: float | None = None
    #: Answers read but not yet asked for (their item comes back on a resume).
    outcomes: dict[str, Outcome] = field(default_factory=dict)
    collected: bool = False
    poller: asyncio.Task[None] | None = None


class BatchProvider:
    """One endpoint's calls sent through its Batch API (see the module docstring)."""

    supports_json_schema = True

    def __init__(
        self,
        endpoint: EndpointConfig,
        client: BatchClient,
        ledger: BatchLedger,
        *,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.name = endpoint.name
        self.kind = endpoint.kind
        self.endpoint = endpoint
        self.wall = wall
        self._client = client
        self._ledger = ledger
        self._max_lines, max_bytes = endpoint.batch.limits(endpoint.kind)
        self._max_bytes = int(max_bytes * BYTES_MARGIN)
        self._linger_s = endpoint.batch.linger_s
        #: The chunk being filled per (run, model).
        self._filling: dict[tuple[str, str], Chunk] = {}
        self._chunks: dict[str, Chunk] = {}
        #: Lines not handed over yet, by item key: an item asked again waits for its line.
        self._by_key: dict[str, tuple[str, str]] = {}
        self._waiters: dict[tuple[str, str], asyncio.Future[Outcome]] = {}
        self._loaded = False
        self._load_lock = asyncio.Lock()
        self._tasks: set[asyncio.Future[object]] = set()
        self._poller = Poller(self, client, ledger, endpoint.batch.poll_s)

    def __repr__(self) -> str:
        return f"BatchProvider(name={self.name!r}, kind={self.kind!r})"

    async def complete(self, request: CompletionRequest) -> CompletionResponse:
        """Wait for the request's line in a batch; raise its error as a live call would."""
        await self._load()
        key = request.item_key or request.request_id or uuid.uuid4().hex
        where = self._by_key.get(key)
        if where is None:
            where = self._add(key, request)
        future = self._waiters.get(where)
        if future is None or future.done():
            future = asyncio.get_running_loop().create_future()
            self._waiters[where] = future
        self._attach(where)
        try:
            outcome = await future
        finally:
            if self._waiters.get(where) is future:
                del self._waiters[where]
        if isinstance(outcome, ProviderError):
            raise ProviderError(
                outcome.kind,
                outcome.provider_message,
                status=outcome.status,
                provider=self.name,
                retry_after_s=outcome.retry_after_s,
            )
        return outcome

    # ---- filling chunks ------------------------------------------------------------

    def _add(self, key: str, request: CompletionRequest) -> tuple[str, str]:
        run_id, filling = request.run_id or "", (request.run_id or "", request.model)
        size = len(json.dumps(request.messages)) + LINE_OVERHEAD
        chunk = self._filling.get(filling)
        if chunk is not None and (
            len(chunk.lines) >= self._max_lines or chunk.size + size > self._max_bytes
        ):
            self._send(chunk)
            chunk = None
        if chunk is None:
            chunk = Chunk(f"c{uuid.uuid4().hex[:20]}", run_id, request.model, first_at=self.wall())
            self._filling[filling] = chunk
            self._chunks[chunk.chunk_id] = chunk
        custom_id = f"{key}-a{request.attempt}"
        chunk.lines[custom_id] = Line(custom_id, request)
        chunk.size += size
        self._by_key[key] = (chunk.chunk_id, custom_id)
        if len(chunk.lines) >= self._max_lines:
            self._send(chunk)
        else:
            self._linger(chunk)
        return chunk.chunk_id, custom_id

    def _linger(self, chunk: Chunk) -> None:
        """Send the chunk once no line has come for `linger_s` (at most LINGER_CAP of
        them after its first line)."""
        if chunk.timer is not None:
            chunk.timer.cancel()
        waited = self.wall() - chunk.first_at
        delay = max(0.0, min(self._linger_s, LINGER_CAP * self._linger_s - waited))
        chunk.timer = asyncio.get_running_loop().call_later(delay, self._send, chunk)

    def _send(self, chunk: Chunk) -> None:
        if self._filling.get((chunk.run_id, chunk.model)) is not chunk:
            return
        del self._filling[(chunk.run_id, chunk.model)]
        if chunk.timer is not None:
            chunk.timer.cancel()
        self._spawn(self._submit(chunk))

    def _spawn(self, work: Awaitable[object]) -> None:
        task: asyncio.Future[object] = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _submit(self, chunk: Chunk) -> None:
        """Write the chunk down, send it, write its batch id down, then follow it."""
        lines = [line for line in chunk.lines.values() if line is not None]
        record = ChunkRecord(
            chunk.chunk_id,
            chunk.run_id,
            self.name,
            self.kind,
            tuple((line.custom_id, _key(line), line.request.attempt) for line in lines),
            chunk.first_at,
        )
        try:
            await asyncio.to_thread(self._ledger.begin, record)
            remote = await self._poller.create(chunk, lines)
        except ProviderError as exc:
            self._refused(chunk, exc)
            return
        except Exception as exc:  # noqa: BLE001 - every line must get an outcome
            log.error("batch chunk %s could not be submitted", chunk.chunk_id, exc_info=exc)
            self._fail_all(chunk, exc)
            return
        chunk.remote, chunk.submitted_at = remote, self.wall()
        # Its requests are in the provider's hands now: only their ids are kept.
        chunk.lines = dict.fromkeys(chunk.lines)
        self._follow(chunk)

    def _refused(self, chunk: Chunk, exc: ProviderError) -> None:
        self._spawn(
            asyncio.to_thread(self._ledger.update, chunk.chunk_id, "refused", 0, 0, str(exc))
        )
        self._finish(chunk, dict.fromkeys(chunk.lines, exc))

    def _fail_all(self, chunk: Chunk, exc: Exception) -> None:
        for custom_id in chunk.lines:
            self._by_key.pop(_key_of(custom_id), None)
            future = self._waiters.get((chunk.chunk_id, custom_id))
            if future is not None and not future.done():
                future.set_exception(exc)
        self._chunks.pop(chunk.chunk_id, None)

    # ---- waiting for answers -------------------------------------------------------

    def _attach(self, where: tuple[str, str]) -> None:
        """A waiter for a line: answered now if its answer was read, else its chunk is
        followed (again, after a resume)."""
        chunk = self._chunks.get(where[0])
        if chunk is None:
            return
        if where[1] in chunk.outcomes:
            self._hand_over(chunk, where[1], chunk.outcomes.pop(where[1]))
            return
        self._follow(chunk)

    def _follow(self, chunk: Chunk) -> None:
        if chunk.remote is None or chunk.collected:
            return
        if chunk.poller is None or chunk.poller.done():
            chunk.poller = asyncio.ensure_future(self._followed(chunk))

    async def _followed(self, chunk: Chunk) -> None:
        """Follow a chunk; whatever goes wrong on the way, its items get an outcome."""
        try:
            await self._poller.follow(chunk)
        except Exception as exc:  # noqa: BLE001 - a waiting item must never wait forever
            log.error("batch chunk %s could not be followed", chunk.chunk_id, exc_info=exc)
            self._fail_all(chunk, exc)

    def waiting_on(self, chunk: Chunk) -> bool:
        """Whether any item still waits for a line of the chunk (a paused or cancelled
        run's items do not: its chunk is followed again when they come back)."""
        return any((chunk.chunk_id, c) in self._waiters for c in chunk.lines)

    def _finish(self, chunk: Chunk, outcomes: dict[str, Outcome]) -> None:
        """Hand each line's outcome to its waiter, or keep it until the item asks."""
        for custom_id, outcome in outcomes.items():
            self._hand_over(chunk, custom_id, outcome)
        chunk.collected = True
        self._drop_if_done(chunk)

    def _hand_over(self, chunk: Chunk, custom_id: str, outcome: Outcome) -> None:
        future = self._waiters.get((chunk.chunk_id, custom_id))
        if future is None or future.done():
            chunk.outcomes[custom_id] = outcome
            return
        self._by_key.pop(_key_of(custom_id), None)
        if isinstance(outcome, CompletionResponse) and chunk.remote is not None:
            started = chunk.submitted_at or chunk.first_at
            outcome = replace(
                outcome,
                latency_ms=max(0.0, self.wall() - started) * 1000,
                batch_id=chunk.remote.batch_id,
                batch_line=custom_id,
            )
        future.set_result(outcome)
        self._drop_if_done(chunk)

    def _drop_if_done(self, chunk: Chunk) -> None:
        """Forget a chunk once every answer went to its item; written down as collected."""
        if chunk.collected and not chunk.outcomes and chunk.chunk_id in self._chunks:
            del self._chunks[chunk.chunk_id]
            if chunk.remote is not None:
                self._spawn(asyncio.to_thread(self._ledger.collected, chunk.chunk_id))

    # ---- resume and cancel ---------------------------------------------------------

    async def _load(self) -> None:
        """Once per process: the chunks an earlier process sent and did not hand over."""
        if self._loaded:
            return
        async with self._load_lock:
            if self._loaded:
                return
            for chunk in await self._poller.recover():
                self._chunks[chunk.chunk_id] = chunk
                for custom_id in chunk.lines:
                    self._by_key[_key_of(custom_id)] = (chunk.chunk_id, custom_id)
            self._loaded = True

    def cancel_run(self, run_id: str) -> None:
        """A cancelled run: its chunk being filled is dropped, its batches cancelled at the
        provider (answers they already hold are kept for a resume)."""
        self._spawn(self._cancel_run(run_id))

    async def _cancel_run(self, run_id: str) -> None:
        for key in [k for k in self._filling if k[0] == run_id]:
            filling = self._filling.pop(key)
            if filling.timer is not None:
                filling.timer.cancel()
            for custom_id in filling.lines:
                self._by_key.pop(_key_of(custom_id), None)
            self._chunks.pop(filling.chunk_id, None)
        for chunk in list(self._chunks.values()):
            if chunk.run_id == run_id and chunk.remote is not None and not chunk.remote.ended:
                await self._poller.cancel(chunk)

    async def aclose(self) -> None:
        for chunk in self._chunks.values():
            if chunk.poller is not None:
                chunk.poller.cancel()
        for task in list(self._tasks):
            task.cancel()
        await self._client.aclose()


def _key(line: Line) -> str:
    return _key_of(line.custom_id)


def _key_of(custom_id: str) -> str:
    """The item key a line's custom id was made from (`{key}-a{attempt}`)."""
    return custom_id.rsplit("-a", 1)[0]
