"""A small blocking client of the server's API, for the CLI (standard library only)."""

from __future__ import annotations

import http.client
import json
import os
import shutil
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from promptlab import errors
from promptlab.config import person_at_keyboard
from promptlab.errors import PromptlabError
from promptlab.server.discovery import ServerInfo

#: Seconds before an idempotent call whose connection dropped is sent again.
RETRY_AFTER_S = 0.5
#: Seconds a call may take (a submit plans nothing before it answers; reads are short).
TIMEOUT_S = 60.0
#: How long one request for a job's state waits for the job to end (a long poll).
JOB_WAIT_S = 20.0
#: Bytes read at a time from a streamed answer (an export).
CHUNK_BYTES = 1 << 16
#: Tries of a call the server answers 429 (this token's share used up: server/fairness.py),
#: each after the Retry-After it said, capped at MAX_RETRY_AFTER_S.
TOO_MANY_TRIES = 5
MAX_RETRY_AFTER_S = 5.0


class ServerError(PromptlabError):
    """The server refused a request (its one-line error) or is not there."""

    def __init__(self, message: str, status: int | None = None, *, dropped: bool = False) -> None:
        super().__init__(message)
        self.status = status
        #: The connection broke after it was made: the server may have the request.
        self.dropped = dropped


def refusal(message: str, status: int, kind: Any) -> PromptlabError:
    """The server's refusal as the error the command would have raised on its own (its
    class named by the answer's `kind`: a usage error exits 2 either way), else a
    ServerError."""
    found = getattr(errors, kind, None) if isinstance(kind, str) else None
    if isinstance(found, type) and issubclass(found, PromptlabError):
        try:
            return found(message)
        except TypeError:  # an error class that wants more than its message
            pass
    return ServerError(message, status)


class ServerClient:
    """Calls to one server with its token; errors come back as one line."""

    def __init__(self, info: ServerInfo, timeout_s: float | None = TIMEOUT_S) -> None:
        self.info = info
        #: None for a call that takes as long as it takes (an export, a job's file).
        self.timeout_s = timeout_s
        #: Who the server records changes for (runs submitted, cancelled): this shell's
        #: author, percent-encoded as headers are Latin-1.
        author = os.environ.get("PROMPTLAB_AUTHOR") or person_at_keyboard(os.environ)
        self._author = urllib.parse.quote(author, safe=" @.-_+")

    def get(self, path: str) -> Any:
        return self._call("GET", path)

    def post(self, path: str, body: Any = None, *, idempotent: bool = False) -> Any:
        """POST JSON. `idempotent` adds an Idempotency-Key and sends once more, with the
        same key, when the connection drops before the answer: the server runs it once."""
        if not idempotent:
            return self._call("POST", path, body if body is not None else {})
        headers = {"Idempotency-Key": uuid.uuid4().hex}
        try:
            return self._call("POST", path, body if body is not None else {}, headers)
        except ServerError as exc:
            if exc.status is not None or not exc.dropped:
                raise
            time.sleep(RETRY_AFTER_S)
            return self._call("POST", path, body if body is not None else {}, headers)

    def call(self, method: str, path: str, body: Any = None) -> Any:
        """Any route's JSON answer (a body only for methods that take one)."""
        if method == "POST":
            return self.post(path, body, idempotent=True)
        return self._call(method, path, body)

    def chunks(self, path: str) -> Iterator[bytes]:
        """A streamed answer's body, a piece at a time (nothing is asked until the first)."""
        with self._open("GET", path) as resp:
            while chunk := resp.read(CHUNK_BYTES):
                yield chunk

    def fetch_file(self, path: str, target: Path, *, force: bool = False) -> dict[str, str]:
        """A file the server answers with, written to `target` here whole or not at all
        (atomicfile's rules: an existing file only with `force`); the answer's headers."""
        from promptlab.atomicfile import check_target, staged_file

        checked = check_target(target, force=force)
        with (
            self._open("GET", path) as resp,
            staged_file(checked, force=force) as staged,
            staged.open("wb") as handle,
        ):
            shutil.copyfileobj(resp, handle)
            return {k.lower(): v for k, v in resp.headers.items()}

    def upload(self, path: str, file: Path) -> Any:
        """POST the file at `file` as the request body, streamed from disk (an import),
        with an Idempotency-Key; sent once more with the same key if the connection
        drops before the answer (the server imports it once). The server answers with
        the import's job at once; this waits for it and returns its result (what the
        importer answered), or raises its refusal as the command would on its own."""
        headers = {"Idempotency-Key": uuid.uuid4().hex, "Content-Type": "application/octet-stream"}
        for attempt in (1, 2):
            with file.open("rb") as handle:
                sent = {**headers, "Content-Length": str(os.fstat(handle.fileno()).st_size)}
                try:
                    with self._open("POST", path, None, sent, handle) as resp:
                        return self._ended(json.loads(resp.read()))["result"]
                except ServerError as exc:
                    if attempt == 2 or exc.status is not None or not exc.dropped:
                        raise
            time.sleep(RETRY_AFTER_S)
        raise AssertionError("unreachable")

    def _ended(self, job: dict[str, Any]) -> dict[str, Any]:
        """The job once it has ended; a failed job raises its refusal."""
        while job["state"] == "running":  # a long poll: the server answers when it ends
            job = self.get(f"/v1/jobs/{job['job_id']}?wait={JOB_WAIT_S:g}")
        if job["state"] != "completed":
            raise refusal(str(job["error"]), 422, job.get("error_kind"))
        return job

    def job_file(self, start: str, body: Any, target: Path, *, force: bool = False) -> int:
        """Start a job (`POST start`), wait for it to end, and write its file to `target`
        here (fetch_file's rules, checked first too); the rows it wrote. A failed job
        raises its error as the command would have on its own."""
        from promptlab.atomicfile import check_target

        check_target(target, force=force)  # refused before the server does any work
        job = self._ended(self.post(start, body, idempotent=True))
        self.fetch_file(f"/v1/jobs/{job['job_id']}/file", target, force=force)
        return int(job["rows"])

    def download(self, path: str, target: Path) -> None:
        """Stream a response body into `target`."""
        with self._open("GET", path) as resp, target.open("wb") as handle:
            shutil.copyfileobj(resp, handle)

    def _call(
        self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> Any:
        with self._open(method, path, body, headers) as resp:
            return json.loads(resp.read())

    def _urlopen(self, request: urllib.request.Request, *, replayable: bool) -> Any:
        """The answer; a 429 (this token's share of the server is used up, nothing was
        done) is asked again after its Retry-After, TOO_MANY_TRIES times at most."""
        for _ in range(TOO_MANY_TRIES - 1):
            try:
                return urllib.request.urlopen(request, timeout=self.timeout_s)  # noqa: S310
            except urllib.error.HTTPError as exc:
                if exc.code != 429 or not replayable:
                    raise
                after = exc.headers.get("Retry-After", "1")
                exc.close()
                time.sleep(min(float(after) if after.isdigit() else 1.0, MAX_RETRY_AFTER_S))
        return urllib.request.urlopen(request, timeout=self.timeout_s)  # noqa: S310

    def _open(
        self,
        method: str,
        path: str,
        body: Any = None,
        headers: dict[str, str] | None = None,
        content: IO[bytes] | None = None,
    ) -> Any:
        """`content`, when given, is sent as the body as it is (a file), instead of `body`."""
        data: Any = content if content is not None else None
        if data is None and body is not None:
            data = json.dumps(body).encode()
        request = urllib.request.Request(
            f"{self.info.url}{path}",
            data=data,
            method=method,
            headers={
                "Authorization": f"Bearer {self.info.token}",
                "Content-Type": "application/json",
                **({"Promptlab-Author": self._author} if self._author else {}),
                **(headers or {}),
            },
        )
        try:
            return self._urlopen(request, replayable=content is None)
        except urllib.error.HTTPError as exc:
            try:
                answer = json.loads(exc.read())
                message, kind = answer.get("error") or exc.reason, answer.get("kind")
            except (ValueError, AttributeError):
                message, kind = exc.reason, None
            raise refusal(str(message), exc.code, kind) from None
        except TimeoutError:
            raise ServerError(
                f"the promptlab server at {self.info.url} did not answer within "
                f"{self.timeout_s:g} s; it may still be working on it"
            ) from None
        except (ConnectionResetError, http.client.RemoteDisconnected) as exc:
            raise ServerError(
                f"the promptlab server at {self.info.url} dropped the connection ({exc})",
                dropped=True,
            ) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise ServerError(
                f"the promptlab server at {self.info.url} is gone ({reason}): start it again "
                "with `promptlab serve`; `promptlab resume RUN_ID` then finishes its runs"
            ) from None
