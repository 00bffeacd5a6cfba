"""Jobs: long operations (exports, imports) run off the request, each with an id.

A client starts one and gets its id at once; it asks for the state until the job has
ended, then fetches the file (an export) or reads the job's result (an import: the
uploaded file is the job's until it ends). Nothing holds a request, a connection or a lock while a
job runs, so twenty clients at once each answer in their own time. A job is its
caller's: another token neither sees nor fetches it, and one token may have at most
fairness.MAX_JOBS running or waiting (more is a 429). A long poll for a job's end waits
on the event loop, holding no thread of the pool the other routes run on. Jobs live in
memory (a restart forgets them: their clients start them again) and their files in a
temporary folder until fetched or KEEP_S has passed.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from promptlab.errors import NotFoundError, PromptlabError
from promptlab.server.fairness import Fairness

#: Jobs running at once; more wait their turn.
MAX_RUNNING = 4
#: Seconds an ended job (and its file) is kept for its client to fetch.
KEEP_S = 3600.0
#: Jobs one server keeps at most (ended ones are dropped oldest first past it).
MAX_KEPT = 1000
#: The longest a request for a job's state waits for it to end.
MAX_WAIT_S = 30.0

RUNNING, COMPLETED, FAILED = "running", "completed", "failed"


@dataclass(frozen=True)
class Job:
    """A job as its client sees it: its state, and what it made or why it failed."""

    job_id: str
    kind: str
    state: str
    #: Rows the job wrote (when completed).
    rows: int | None = None
    #: The one-line error and its class (when failed), as a refusal would carry them.
    error: str | None = None
    error_kind: str | None = None
    #: What an import answers (when completed): the record as JSON-able data.
    result: Any = None


@dataclass
class _Held:
    job: Job
    owner: str
    folder: Path
    file: Path | None
    ended_at: float | None = None
    #: Long polls waiting for the end: each is woken (on its own loop) when it comes.
    waiters: list[Callable[[], None]] = field(default_factory=list)
    #: Gives the job's place in its owner's MAX_JOBS back.
    release: Callable[[], None] = lambda: None


class Jobs:
    """The server's jobs: start one, read its state, fetch its file."""

    def __init__(self, fairness: Fairness | None = None) -> None:
        self._fairness = fairness
        self._pool = ThreadPoolExecutor(max_workers=MAX_RUNNING, thread_name_prefix="job")
        self._lock = threading.Lock()
        self._held: dict[str, _Held] = {}

    def start(self, owner: str, kind: str, file_name: str, work: Callable[[Path], int]) -> Job:
        """Run `work(path)` (it writes the file at `path`, named `file_name`, and returns
        the rows written) as `owner`'s job, acting as the caller does now."""
        self._sweep()
        release = self._fairness.job(owner) if self._fairness is not None else None
        folder = Path(tempfile.mkdtemp(prefix="promptlab-job-"))
        path = folder / file_name
        return self._started(
            owner, kind, folder, path, lambda job: replace(job, rows=work(path)), release
        )

    def start_task(self, owner: str, kind: str, folder: Path, work: Callable[[], Any]) -> Job:
        """Run `work()` as `owner`'s job, its answer (JSON-able) the job's result;
        `folder` (an uploaded file's) is the job's, removed once the job is dropped."""
        self._sweep()
        try:
            release = self._fairness.job(owner) if self._fairness is not None else None
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise

        def task(job: Job) -> Job:
            try:
                return replace(job, result=work())
            finally:  # an upload can be a gigabyte: gone as soon as it is imported
                shutil.rmtree(folder, ignore_errors=True)

        return self._started(owner, kind, folder, None, task, release)

    def _started(
        self,
        owner: str,
        kind: str,
        folder: Path,
        file: Path | None,
        work: Callable[[Job], Job],
        release: Callable[[], None] | None,
    ) -> Job:
        job = Job(uuid.uuid4().hex[:16], kind, RUNNING)
        held = _Held(job, owner, folder, file)
        if release is not None:
            held.release = release
        with self._lock:
            self._held[job.job_id] = held
        context = contextvars.copy_context()  # who acts: the request's principal
        self._pool.submit(context.run, self._run, job.job_id, work)
        return job

    def get(self, owner: str, job_id: str) -> Job:
        """The job's state now."""
        return self._mine(owner, job_id).job

    async def wait(self, owner: str, job_id: str, wait_s: float) -> Job:
        """The job's state once it has ended or `wait_s` has passed (a client's long
        poll: one request where many short ones would do), awaited on the caller's
        event loop: a thousand long polls hold no thread."""
        held = self._mine(owner, job_id)
        loop = asyncio.get_running_loop()
        ended: asyncio.Future[None] = loop.create_future()

        def end() -> None:
            if not ended.done():
                ended.set_result(None)

        def wake() -> None:
            with contextlib.suppress(RuntimeError):  # the server's loop closed meanwhile
                loop.call_soon_threadsafe(end)

        with self._lock:
            if held.ended_at is not None:
                return held.job
            held.waiters.append(wake)
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(ended, min(wait_s, MAX_WAIT_S))
        finally:
            with self._lock, contextlib.suppress(ValueError):
                held.waiters.remove(wake)
        return held.job

    def file(self, owner: str, job_id: str) -> Path:
        """The completed job's file; refused while it runs or when it failed."""
        held = self._mine(owner, job_id)
        if held.job.state != COMPLETED or held.file is None:
            raise NotFoundError(f"job {job_id} has no file: it is {held.job.state}")
        return held.file

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        with self._lock:
            held, self._held = list(self._held.values()), {}
        for one in held:
            shutil.rmtree(one.folder, ignore_errors=True)

    def _run(self, job_id: str, work: Callable[[Job], Job]) -> None:
        held = self._held[job_id]
        try:
            ended = replace(work(held.job), state=COMPLETED)
        except PromptlabError as exc:
            ended = replace(held.job, state=FAILED, error=str(exc), error_kind=type(exc).__name__)
        except Exception as exc:  # noqa: BLE001 - a bug: the client hears of it, in one line
            ended = replace(held.job, state=FAILED, error=f"the job failed: {exc!r}")
        with self._lock:
            held.job, held.ended_at = ended, time.monotonic()
            waiters = list(held.waiters)
        held.release()
        for wake in waiters:
            wake()

    def _mine(self, owner: str, job_id: str) -> _Held:
        with self._lock:
            held = self._held.get(job_id)
        if held is None or held.owner != owner:  # another's job is as good as none
            raise NotFoundError(f"no job {job_id!r}")
        return held

    def _sweep(self) -> None:
        """Drop ended jobs older than KEEP_S, and the oldest ended past MAX_KEPT."""
        now = time.monotonic()
        with self._lock:
            ended = sorted(
                (h.ended_at, job_id) for job_id, h in self._held.items() if h.ended_at is not None
            )
            excess = max(0, len(self._held) - MAX_KEPT)
            gone = [
                job_id for i, (at, job_id) in enumerate(ended) if i < excess or now - at > KEEP_S
            ]
            dropped = [self._held.pop(job_id) for job_id in gone]
        for held in dropped:
            shutil.rmtree(held.folder, ignore_errors=True)
