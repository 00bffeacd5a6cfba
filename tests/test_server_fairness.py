"""No caller can starve the rest (server/fairness.py): one viewer's 200 long polls and
150 export jobs at once hold no thread another principal's request needs. Its long
polls past its bound, and its jobs past its bound, are answered 429 with Retry-After at
once; the long polls it may hold wait on the event loop, so an admin's `GET /v1/runs`
is answered while they are all still waiting. A real uvicorn server on loopback."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from promptlab.config import Settings
from promptlab.server import fairness
from promptlab.server.run import Serving
from promptlab.workbench import Workbench

#: Seconds a test waits for what it expects before it fails (never a sleep).
PATIENCE_S = 60.0


def call(url: str, token: str, method: str = "GET", body: Any = None) -> tuple[int, Any, str]:
    """(status, JSON answer, Retry-After) of one request, without the client's retries."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        url,
        data=data,
        method=method,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=PATIENCE_S) as answer:  # noqa: S310
            return answer.status, json.loads(answer.read()), ""
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read()), exc.headers.get("Retry-After", "")


@pytest.fixture
def serving(db_path: Path) -> Iterator[Serving]:
    with Workbench.open(Settings.from_env()) as wb:
        server = Serving(wb, port=0).start()
        try:
            yield server
        finally:
            server.stop()


def test_one_viewer_s_long_polls_and_jobs_leave_another_principal_answered(
    serving: Serving,
) -> None:
    wb, base, admin = serving.wb, serving.info.url, serving.info.token
    record, viewer = wb.tokens.create("greedy-viewer", "viewer")
    # One job of the viewer's that runs until the test lets it end: its long polls wait.
    gate = threading.Event()
    jobs = serving._app.state.jobs
    job = jobs.start(record.token_id, "table-export", "held.csv", lambda _p: int(gate.wait()))
    polls: list[Future[tuple[int, Any, str]]] = []
    starts: list[Future[tuple[int, Any, str]]] = []
    with ThreadPoolExecutor(max_workers=350) as pool:
        try:
            poll = f"{base}/v1/jobs/{job.job_id}?wait=30"
            polls = [pool.submit(call, poll, viewer) for _ in range(200)]
            export = {"table": "results", "format": "csv"}
            starts = [
                pool.submit(call, f"{base}/v1/jobs/table-exports", viewer, "POST", export)
                for _ in range(150)
            ]
            deadline = time.monotonic() + PATIENCE_S
            # Every poll past the bound is refused at once; the rest wait for the job.
            while sum(f.done() for f in polls) < 200 - fairness.MAX_LONG_POLLS or not all(
                f.done() for f in starts
            ):
                assert time.monotonic() < deadline, [f.result() for f in polls if f.done()][:3]
                time.sleep(0.01)
            held = [f for f in polls if not f.done()]
            assert len(held) == fairness.MAX_LONG_POLLS
            # Another principal is answered while all of them still wait.
            status, runs, _ = call(f"{base}/v1/runs", admin)
            assert status == 200 and isinstance(runs, list)
            assert not any(f.done() for f in held)
        finally:
            gate.set()
        refused = [f.result() for f in polls + starts if f.result()[0] == 429]
        answered = [f.result() for f in held]
    assert all(s == 200 and a["state"] == "completed" for s, a, _ in answered), answered
    assert len(refused) >= 200 - fairness.MAX_LONG_POLLS
    assert all(after.isdigit() and "ask again in" in a["error"] for _, a, after in refused)
    # Each job start was taken or refused; the ones taken ran (quick exports of an empty `results`).
    assert {f.result()[0] for f in starts} <= {202, 429}
    assert any(f.result()[0] == 202 for f in starts)


def test_a_token_may_have_so_many_jobs_running_or_waiting(tmp_path: Path) -> None:
    from promptlab.server.jobs import Jobs

    shares = fairness.Fairness("owner")
    jobs = Jobs(shares)
    gate = threading.Event()
    try:
        held = [
            jobs.start("tok_a", "table-export", "x.csv", lambda _p: int(gate.wait()))
            for _ in range(fairness.MAX_JOBS)
        ]
        with pytest.raises(fairness.TooMany, match=f"already has {fairness.MAX_JOBS} jobs"):
            jobs.start("tok_a", "table-export", "x.csv", lambda _p: 0)
        jobs.start("tok_b", "table-export", "x.csv", lambda _p: 0)  # another token's share
    finally:
        gate.set()
    for job in held:
        assert asyncio.run(jobs.wait("tok_a", job.job_id, PATIENCE_S)).state == "completed"
    jobs.start("tok_a", "table-export", "x.csv", lambda _p: 0)  # its places came back
    jobs.close()


def test_a_token_s_rate_and_open_requests_are_bounded() -> None:
    clock = type("Clock", (), {"now": 0.0, "monotonic": lambda self: self.now})()
    shares = fairness.Fairness("owner", clock)
    releases = [shares.admit("tok_a") for _ in range(fairness.IN_FLIGHT)]
    with pytest.raises(fairness.TooMany, match="requests open at once"):
        shares.admit("tok_a")
    shares.admit("tok_b")()  # another token is not held back
    for release in releases:
        release()
    for _ in range(fairness.BURST - fairness.IN_FLIGHT):
        shares.admit("tok_a")()
    with pytest.raises(fairness.TooMany, match="requests a second") as refused:
        shares.admit("tok_a")
    assert refused.value.retry_after == "1"
    clock.now += 1.0  # a second later the bucket has RATE_PER_S again
    for _ in range(int(fairness.RATE_PER_S)):
        shares.admit("tok_a")()
    for _ in range(fairness.BURST + 1):  # the owner has no rate bound
        shares.admit("owner")()
