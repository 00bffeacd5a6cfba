"""fakellm's Batch APIs' state: uploaded files, batches of both providers, their status as
a pure function of the clock, and the answers of their lines.

Each read asks the clock how far the batch has got (see `Batch.phase`): validating for the
first tenth of `batch_delay_s`, then in progress with lines answered at an even pace until
nine tenths, then finalizing, then done; with no delay a batch is done at its first read.
The lines answered by then are answered at that read, each once, by the same simulation
as a live request (`Answer`, the app's `batch_answer`), in a shuffled order that is also
the order of the results. A batch not done by its expiry expires (its unanswered lines
expire); a cancelled one answers no line after the cancel.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import random
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from promptlab.clock import Clock
from promptlab.fakellm.config import FakeLLMConfig
from promptlab.fakellm.wire import dumps
from promptlab.providers.base import CompletionRequest

#: Shares of `batch_delay_s`: validating until VALIDATED, answering lines until PROCESSED,
#: finalizing until the end.
VALIDATED = 0.1
PROCESSED = 0.9
#: The providers' completion window: a batch not done within it expires.
WINDOW_S = 24 * 3600.0
#: The providers' own limits: requests and bytes per batch.
OPENAI_MAX_REQUESTS = 50_000
OPENAI_MAX_BYTES = 200 * 1024 * 1024
ANTHROPIC_MAX_REQUESTS = 100_000
ANTHROPIC_MAX_BYTES = 256 * 1024 * 1024
#: How long an uploaded batch file is kept, as OpenAI keeps them by default (30 days).
FILE_KEPT_S = 30 * 24 * 3600
#: Lines answered in one go before a long read lets other requests in.
ANSWERS_PER_TURN = 200
#: Statuses after which nothing changes.
ENDED = frozenset({"completed", "failed", "expired", "cancelled"})
#: OpenAI's status names (used inside) to Anthropic's processing_status.
ANTHROPIC_STATUS = {"cancelling": "canceling", **{s: "ended" for s in ENDED}}

#: (request, anthropic format, request id, fail) -> (HTTP status, the body a live request gets).
Answer = Callable[[CompletionRequest, bool, str, bool], tuple[int, bytes]]


def limits(config: FakeLLMConfig, anthropic: bool) -> tuple[int, int]:
    """(requests, bytes) a batch may hold: the switches, else the provider's own limits."""
    requests = ANTHROPIC_MAX_REQUESTS if anthropic else OPENAI_MAX_REQUESTS
    size = ANTHROPIC_MAX_BYTES if anthropic else OPENAI_MAX_BYTES
    return config.batch_max_requests or requests, config.batch_max_bytes or size


@dataclass(frozen=True)
class Line:
    """One request of a batch, checked as the live endpoint checks it."""

    custom_id: str
    request: CompletionRequest


@dataclass
class StoredFile:
    """An OpenAI file: what was uploaded (bytes past the batch limit are counted, not kept)."""

    id: str
    filename: str
    purpose: str
    created_at: int
    data: bytes
    size: int

    @property
    def whole(self) -> bool:
        return self.size == len(self.data)

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "file",
            "bytes": self.size,
            "created_at": self.created_at,
            "expires_at": self.created_at + FILE_KEPT_S,
            "filename": self.filename,
            "purpose": self.purpose,
            "status": "processed",
            "status_details": None,
        }


@dataclass(frozen=True)
class Phase:
    """Where a batch is at one moment: its status (OpenAI's names), how many lines are
    answered, and the offsets from creation of the events that have happened."""

    status: str
    done: int
    at: Mapping[str, float]


@dataclass
class Batch:
    """One batch of either provider; `refused` holds the errors of an input that failed
    validation (OpenAI), and such a batch holds no lines."""

    id: str
    anthropic: bool
    lines: list[Line]
    order: list[int]
    failing: frozenset[int]
    created: float
    created_wall: datetime
    delay_s: float
    expire_s: float
    refused: list[dict[str, Any]] = field(default_factory=list)
    fields: dict[str, Any] = field(default_factory=dict)
    cancel_at: float | None = None
    #: Answered lines by index: (HTTP status, body, request id).
    results: dict[int, tuple[int, bytes, str]] = field(default_factory=dict)
    #: Input and output tokens of the answered lines (OpenAI's `usage`).
    tokens: list[int] = field(default_factory=lambda: [0, 0])
    output: bytes | None = None
    errors: bytes | None = None

    def stamp(self, offset: float) -> datetime:
        return self.created_wall + timedelta(seconds=offset)

    def processed(self, t: float) -> int:
        """Lines answered `t` seconds after creation: none while validating, then at an
        even pace, all by the end of processing."""
        start, end = VALIDATED * self.delay_s, PROCESSED * self.delay_s
        if t >= end:
            return len(self.lines)
        return 0 if t < start else math.floor(len(self.lines) * (t - start) / (end - start))

    def phase(self, t: float) -> Phase:
        """The batch `t` seconds after creation (a pure function of `t` and the cancel)."""
        d, e = self.delay_s, self.expire_s
        start, end = VALIDATED * d, PROCESSED * d
        begun = {"in_progress": start} if t >= start else {}
        if self.refused:
            return (
                Phase("failed", 0, {"failed": start}) if t >= start else Phase("validating", 0, {})
            )
        if self.cancel_at is not None:
            c, finish = self.cancel_at, self.cancel_at + (d - end)
            at = {"cancelling": c, **({"in_progress": start} if c >= start else {})}
            if t >= finish:
                return Phase("cancelled", self.processed(c), {**at, "cancelled": finish})
            return Phase("cancelling", self.processed(c), at)
        if t >= d and d <= e:
            return Phase("completed", len(self.lines), {**begun, "finalizing": end, "completed": d})
        if t >= e:
            at = {"expired": e, **({"in_progress": start} if e >= start else {})}
            return Phase("expired", self.processed(e), at)
        if t >= end:
            return Phase("finalizing", len(self.lines), {**begun, "finalizing": end})
        return Phase("in_progress" if t >= start else "validating", self.processed(t), begun)

    def counts(self, phase: Phase) -> tuple[int, int]:
        """(succeeded, errored) among the lines answered by `phase`."""
        answered = [self.results[i][0] for i in self.order[: phase.done] if i in self.results]
        ok = sum(1 for status in answered if status == 200)
        return ok, len(answered) - ok


@dataclass
class BatchStats:
    """What the batch routes have seen since start (or the last reset)."""

    batches_created: int = 0
    batch_lines_received: int = 0
    batch_lines_answered: int = 0
    batch_lines_errored: int = 0
    custom_ids: Counter[str] = field(default_factory=Counter)
    #: Whether a batch was written with `batch_bad_lines` already (the first one only).
    bad_lines_written: bool = False

    def as_json(self) -> dict[str, Any]:
        repeated = sorted(cid for cid, n in self.custom_ids.items() if n > 1)
        return {
            "batches_created": self.batches_created,
            "batch_lines_received": self.batch_lines_received,
            "batch_lines_answered": self.batch_lines_answered,
            "batch_lines_errored": self.batch_lines_errored,
            "batch_custom_ids_repeated": len(repeated),
            "batch_repeated_ids": repeated[:100],
        }


class BatchStore:
    """Files and batches in memory, read through the clock."""

    def __init__(self, config: FakeLLMConfig, clock: Clock, answer: Answer) -> None:
        self.config = config
        self.clock = clock
        self._answer = answer
        # Ids keep counting across resets, so an id a client still holds never names a new batch.
        self._ids = itertools.count(1)
        self.clear()

    def clear(self) -> None:
        self.files: dict[str, StoredFile] = {}
        self.batches: dict[str, Batch] = {}
        self.stats = BatchStats()

    def new_id(self, prefix: str) -> str:
        return f"{prefix}{next(self._ids):024x}"

    def add_file(self, filename: str, purpose: str, data: bytes, size: int) -> StoredFile:
        stored = StoredFile(
            self.new_id("file-"), filename, purpose, int(self.clock.now().timestamp()), data, size
        )
        self.files[stored.id] = stored
        return stored

    def create(
        self,
        lines: list[Line],
        *,
        anthropic: bool,
        refused: list[dict[str, Any]] | None = None,
        **fields: Any,
    ) -> Batch:
        """A new batch of these checked lines (or of none, refused at validation)."""
        batch_id = self.new_id("msgbatch_" if anthropic else "batch_")
        # Seeded by the server's seed and the batch: the same run of batches, the same order.
        rng = random.Random(f"{self.config.seed}/{batch_id}")
        order = list(range(len(lines)))
        rng.shuffle(order)
        failing = round(self.config.batch_line_fail_rate * len(lines))
        batch = Batch(
            batch_id,
            anthropic,
            lines,
            order,
            frozenset(rng.sample(range(len(lines)), failing)),
            self.clock.monotonic(),
            self.clock.now(),
            self.config.batch_delay_s,
            self._expire_s(),
            refused or [],
            fields,
        )
        self.batches[batch_id] = batch
        self.stats.batches_created += 1
        self.stats.batch_lines_received += len(lines)
        self.stats.custom_ids.update(line.custom_id for line in lines)
        return batch

    def _expire_s(self) -> float:
        """When the batch being created expires: `batch_expire_s` (for the first
        `batch_expire_first` batches, when that is set), else the completion window."""
        first = self.config.batch_expire_first
        if self.config.batch_expire_s is None or (
            first is not None and self.stats.batches_created >= first
        ):
            return WINDOW_S
        return self.config.batch_expire_s

    async def observe(self, batch: Batch) -> Phase:
        """The batch now: the lines reached are answered (once), and an ended batch's
        results are written. Long runs of answers let other requests in between."""
        phase = batch.phase(self.clock.monotonic() - batch.created)
        # No await between reading the next line and answering it: a concurrent read of
        # the same batch takes the line after, never the same one.
        while len(batch.results) < phase.done:
            self._answer_line(batch, batch.order[len(batch.results)])
            if len(batch.results) % ANSWERS_PER_TURN == 0:
                await asyncio.sleep(0)
        if phase.status in ENDED and batch.output is None and not batch.refused:
            self._write(batch, phase)
        return phase

    async def cancel(self, batch: Batch) -> Phase | None:
        """Cancel a batch that has not ended (cancelling again changes nothing); None
        when it has ended."""
        now = self.clock.monotonic() - batch.created
        if batch.cancel_at is None and batch.phase(now).status not in ENDED:
            batch.cancel_at = now
        phase = await self.observe(batch)
        return None if phase.status in ENDED else phase

    def _answer_line(self, batch: Batch, index: int) -> None:
        rid = self.new_id("req_")
        status, body = self._answer(
            batch.lines[index].request, batch.anthropic, rid, index in batch.failing
        )
        batch.results[index] = (status, body, rid)
        if status == 200:
            self.stats.batch_lines_answered += 1
            if not batch.anthropic:
                usage = json.loads(body)["usage"]
                batch.tokens[0] += usage["prompt_tokens"]
                batch.tokens[1] += usage["completion_tokens"]
        else:
            self.stats.batch_lines_errored += 1

    def _write(self, batch: Batch, phase: Phase) -> None:
        """The results of an ended batch: Anthropic's one JSONL, OpenAI's output and error files."""
        unanswered = "expired" if phase.status == "expired" else "cancelled"
        rows = [(batch.lines[i].custom_id, batch.results.get(i), unanswered) for i in batch.order]
        bad = self.config.batch_bad_lines if not self.stats.bad_lines_written else 0
        self.stats.bad_lines_written = self.stats.bad_lines_written or bad > 0
        if batch.anthropic:
            lines = [anthropic_result(*row) for row in rows]
            batch.output = b"".join(line + b"\n" for line in unreadable(lines, bad, True))
            return
        out = [openai_result(self.new_id("batch_req_"), *row) for row in rows]
        out = list(
            zip(
                [ok for ok, _ in out],
                unreadable([line for _, line in out], bad, False),
                strict=True,
            )
        )
        batch.output = b"".join(line + b"\n" for ok, line in out if ok)
        batch.errors = b"".join(line + b"\n" for ok, line in out if not ok)
        for kind, data in (("output", batch.output), ("error", batch.errors)):
            if data:
                name = f"batch_{batch.id.removeprefix('batch_')}_{kind}.jsonl"
                stored = self.add_file(name, "batch_output", data, len(data))
                batch.fields[f"{kind}_file_id"] = stored.id


def unreadable(lines: list[bytes], count: int, anthropic: bool) -> list[bytes]:
    """`lines` with the first `count` made unreadable, each in the next way in turn."""
    out = list(lines)
    for i in range(min(count, len(out))):
        row = json.loads(out[i])
        way = i % 4
        if way == 0:  # cut short: not JSON, though its custom_id is still there
            out[i] = out[i][: len(out[i]) // 2]
        elif way == 1:  # JSON, but not an object: no line it could name
            out[i] = dumps([row["custom_id"]])
        elif way == 2:  # the error as a bare string
            bare = {"type": "errored", "error": "boom"}
            out[i] = dumps({**row, "result": bare} if anthropic else {**row, "error": "boom"})
        elif anthropic:  # an answer whose content is not a list
            result = row["result"]
            message = {**(result.get("message") or {}), "content": "nope"}
            out[i] = dumps({**row, "result": {"type": "succeeded", "message": message}})
        else:  # an answer whose choices are not a list
            response = row.get("response") or {}
            body = {**(response.get("body") or {}), "choices": "nope"}
            answered = {**response, "status_code": 200, "body": body}
            out[i] = dumps({**row, "error": None, "response": answered})
    return out


def openai_result(
    line_id: str, custom_id: str, result: tuple[int, bytes, str] | None, unanswered: str
) -> tuple[bool, bytes]:
    """(succeeded, the output- or error-file line) for one line of an OpenAI batch."""
    row: dict[str, Any] = {"id": line_id, "custom_id": custom_id}
    if result is None:
        message = (
            "This request could not be executed before the completion window expired."
            if unanswered == "expired"
            else "This request was not executed because the batch was cancelled."
        )
        row.update(response=None, error={"code": f"batch_{unanswered}", "message": message})
        return False, dumps(row)
    status, body, rid = result
    row.update(
        response={"status_code": status, "request_id": rid, "body": json.loads(body)}, error=None
    )
    return status == 200, dumps(row)


def anthropic_result(
    custom_id: str, result: tuple[int, bytes, str] | None, unanswered: str
) -> bytes:
    """One line of an Anthropic batch's results."""
    if result is None:
        outcome: dict[str, Any] = {"type": "canceled" if unanswered == "cancelled" else "expired"}
    elif result[0] == 200:
        outcome = {"type": "succeeded", "message": json.loads(result[1])}
    else:
        outcome = {"type": "errored", "error": json.loads(result[1])}
    return dumps({"custom_id": custom_id, "result": outcome})
