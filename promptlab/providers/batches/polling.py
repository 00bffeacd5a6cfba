"""Following a provider batch: its submit (found again if its answer was lost), its
states polled and written down, its results read and checked, its cancel; and on a
resume, the chunks an earlier process sent, read back from the ledger."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from promptlab.errors import ErrorKind, ProviderError
from promptlab.providers.batches.clients import (
    BatchClient,
    Line,
    Outcome,
    RemoteBatch,
    unreached,
)
from promptlab.providers.batches.ledger import BatchLedger

if TYPE_CHECKING:
    from promptlab.providers.batches.provider import BatchProvider, Chunk

log = logging.getLogger("promptlab.providers.batches")

#: A submit that failed this way may have made its batch all the same.
_UNSURE = frozenset({ErrorKind.TIMEOUT, ErrorKind.CONNECTION, ErrorKind.SERVER})
#: Seconds between two log lines about a batch that is still not done.
SAY_EVERY_S = 3600.0


class Poller:
    """Talks to the Batch API for one BatchProvider."""

    def __init__(
        self, owner: BatchProvider, client: BatchClient, ledger: BatchLedger, poll_s: float
    ) -> None:
        self.owner = owner
        self.client = client
        self.ledger = ledger
        self.poll_s = poll_s

    async def create(self, chunk: Chunk, lines: Sequence[Line]) -> RemoteBatch:
        """Submit the chunk (written down already); its batch id written down before
        this returns. A submit whose answer was lost is looked for before it is failed."""
        try:
            remote = await self.client.submit(chunk.chunk_id, lines)
        except ProviderError as exc:
            if exc.kind not in _UNSURE:
                raise
            found = await self.client.find(chunk.chunk_id, len(lines), chunk.first_at)
            if found is None:
                raise
            remote = await self.client.retrieve(found)
        await asyncio.to_thread(
            self.ledger.submitted, chunk.chunk_id, remote.batch_id, remote.state, remote.expires_at
        )
        log.info(
            "%s: batch %s sent: %d lines (chunk %s)",
            self.owner.name,
            remote.batch_id,
            len(lines),
            chunk.chunk_id,
        )
        return remote

    async def follow(self, chunk: Chunk) -> None:
        """Poll until the batch ends (or no item waits for it any more), then hand over
        its results."""
        assert chunk.remote is not None
        said_at = self.owner.wall()
        while not chunk.remote.ended:
            await asyncio.sleep(self.poll_s)
            if not self.owner.waiting_on(chunk):
                return  # paused or cancelled: followed again when its items come back
            try:
                remote = await self.client.retrieve(chunk.remote.batch_id)
            except ProviderError as exc:
                if exc.kind in (ErrorKind.NOT_FOUND, ErrorKind.AUTH):
                    self.owner._finish(chunk, dict.fromkeys(chunk.lines, exc))
                    return
                log.warning(
                    "%s: batch %s could not be read (%s); polling on",
                    self.owner.name,
                    chunk.remote.batch_id,
                    exc,
                )
                continue
            if (remote.state, remote.succeeded, remote.failed) != (
                chunk.remote.state,
                chunk.remote.succeeded,
                chunk.remote.failed,
            ):
                await asyncio.to_thread(
                    self.ledger.update,
                    chunk.chunk_id,
                    remote.state,
                    remote.succeeded,
                    remote.failed,
                    remote.message,
                )
            chunk.remote = remote
            if self.owner.wall() - said_at >= SAY_EVERY_S:
                said_at = self.owner.wall()
                log.warning("%s", waiting_line(remote, chunk.submitted_at, said_at))
        await self._collect(chunk)

    async def _collect(self, chunk: Chunk) -> None:
        """Each line's outcome: unknown and repeated ids said once and left out, a line
        the results lack is one the batch never reached (or lost: sent again)."""
        remote = chunk.remote
        assert remote is not None
        outcomes: dict[str, Outcome] = {}
        if remote.state in ("failed", "refused"):
            refused = ProviderError(
                ErrorKind.BAD_REQUEST,
                f"batch {remote.batch_id} was refused by {self.owner.name}: "
                f"{remote.message or 'no reason given'}",
            )
            self.owner._finish(chunk, dict.fromkeys(chunk.lines, refused))
            return
        unknown, repeated = [], []
        async for custom_id, outcome in self.client.results(remote):
            if custom_id not in chunk.lines:
                unknown.append(custom_id)
            elif custom_id in outcomes:
                repeated.append(custom_id)
            else:
                outcomes[custom_id] = outcome
        if unknown or repeated:
            log.warning(
                "%s: batch %s's results name %d line(s) it was not sent (%s) and repeat %d "
                "(%s); those were left out, the first answer of each line kept",
                self.owner.name,
                remote.batch_id,
                len(unknown),
                ", ".join(unknown[:3]),
                len(repeated),
                ", ".join(repeated[:3]),
            )
        for custom_id in chunk.lines:
            if custom_id not in outcomes:
                outcomes[custom_id] = unreached(remote.batch_id, remote.state, custom_id)
        self.owner._finish(chunk, outcomes)

    async def cancel(self, chunk: Chunk) -> None:
        assert chunk.remote is not None
        try:
            await self.client.cancel(chunk.remote.batch_id)
        except ProviderError as exc:
            log.warning(
                "%s: batch %s could not be cancelled: %s",
                self.owner.name,
                chunk.remote.batch_id,
                exc,
            )
            return
        await asyncio.to_thread(
            self.ledger.update,
            chunk.chunk_id,
            "cancelling",
            chunk.remote.succeeded,
            chunk.remote.failed,
            None,
        )

    async def recover(self) -> list[Chunk]:
        """The chunks an earlier process wrote down and did not hand over: each with its
        batch (found again when its submit's answer was lost; otherwise it never reached
        the provider, and its items are sent in new chunks)."""
        from promptlab.providers.batches.provider import Chunk

        chunks = []
        for stored in await asyncio.to_thread(self.ledger.open_chunks, self.owner.name):
            batch_id = stored.batch_id
            if batch_id is None:
                batch_id = await self.client.find(
                    stored.chunk_id, len(stored.lines), stored.created_at
                )
                if batch_id is None:
                    await asyncio.to_thread(
                        self.ledger.update,
                        stored.chunk_id,
                        "refused",
                        0,
                        0,
                        "its submit never answered and the provider holds no such batch",
                    )
                    continue
            remote = await self.client.retrieve(batch_id)
            if stored.batch_id is None:
                await asyncio.to_thread(
                    self.ledger.submitted,
                    stored.chunk_id,
                    batch_id,
                    remote.state,
                    remote.expires_at,
                )
            chunk = Chunk(stored.chunk_id, stored.run_id, first_at=stored.created_at)
            chunk.lines = dict.fromkeys(c for c, _, _ in stored.lines)
            chunk.remote, chunk.submitted_at = remote, stored.submitted_at or stored.created_at
            chunks.append(chunk)
        return chunks


def waiting_line(remote: RemoteBatch, submitted_at: float | None, now: float) -> str:
    """What a run says of a batch that is not done: how long, how far, what comes next."""
    waited = now - (submitted_at or now)
    hours, minutes = int(waited // 3600), int(waited % 3600 // 60)
    then = "its unanswered lines are then sent again in a new batch (the run's retry policy)"
    expires = ""
    if remote.expires_at is not None:
        left = max(0.0, remote.expires_at - now)
        expires = f"; it expires in {int(left // 3600)} h {int(left % 3600 // 60)} min, and {then}"
    return (
        f"batch {remote.batch_id}: {remote.state} for {hours} h {minutes} min "
        f"({remote.counts}){expires}"
    )
