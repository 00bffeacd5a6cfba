"""Request bodies that are files (datasets, feedback, logs, exposures): streamed to disk,
bounded, and imported as jobs.

The importers read from a path (DuckDB's readers), so an upload is written chunk by
chunk into a private temporary folder under its own file name and removed afterwards;
it never sits whole in memory, and a body past the bound stops being read at the bound.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request

from promptlab.errors import DatasetError
from promptlab.server.answers import Submits, upload_once
from promptlab.server.jobs import Job, Jobs

#: The largest file an upload may be: the importers' own cap for a file on disk.
MAX_UPLOAD_BYTES = 2**30
#: The longest file name most file systems take.
MAX_NAME_BYTES = 255


class UploadTooLarge(Exception):
    """A body past its bound while it was read (the API answers 413)."""


@asynccontextmanager
async def received_file(
    request: Request, filename: str, max_bytes: int = MAX_UPLOAD_BYTES
) -> AsyncIterator[Path]:
    """The request's body as the file `filename` (its last part only), for the block."""
    name = Path(filename).name
    if not name or name in (".", ".."):
        raise DatasetError("filename: give the file's name (its extension says its format)")
    if len(name.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES or not name.isprintable():
        raise DatasetError(
            f"filename: at most {MAX_NAME_BYTES} bytes of printable characters, not {name!r:.80}"
        )
    with tempfile.TemporaryDirectory(prefix="promptlab-upload-") as folder:
        path = Path(folder) / name
        written = 0
        with path.open("wb") as handle:
            async for chunk in request.stream():
                written += len(chunk)
                if written > max_bytes:
                    raise UploadTooLarge(f"{name}: more than the {max_bytes:,} bytes of an upload")
                # A plain write: chunks are small and the page cache takes them at once.
                handle.write(chunk)
        yield path


async def import_job(
    request: Request,
    filename: str,
    submits: Submits[Job],
    key: str | None,
    kind: str,
    work: Callable[[Path], Any],
) -> Job:
    """The request's body received as `filename`, then imported by `work(path)` as the
    caller's job (server/jobs.py): the answer is the job, at once, and `work`'s answer
    its result. A retry with the same Idempotency-Key and file gets the same job."""
    from promptlab.server.principals import principal_of

    jobs: Jobs = request.app.state.jobs
    owner = principal_of(request.scope).token_id
    async with received_file(request, filename) as received:
        folder = Path(tempfile.mkdtemp(prefix="promptlab-job-"))
        path = folder / received.name
        shutil.move(received, path)
    started: list[Job] = []

    def start() -> Job:
        started.append(jobs.start_task(owner, kind, folder, lambda: work(path)))
        return started[0]

    try:
        job = await run_in_threadpool(upload_once, submits, request, key, path, start)
    finally:
        if not started:  # refused, or a retry answered with the first job: not ours
            shutil.rmtree(folder, ignore_errors=True)
    return job
