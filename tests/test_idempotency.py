"""Submits by idempotency key (issue 58): a lock per key, not per process, so a slow
submit holds up no other key; and the keys are kept in the database, so a client that
retries after the server restarted gets the first answer and nothing runs twice."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from promptlab.server.answers import Submits
from promptlab.server.refusals import Refused
from tests.test_server import Served

PATIENCE_S = 60.0


def test_a_slow_submit_holds_up_no_other_key() -> None:
    submits: Submits[str] = Submits()
    slow_started, release = threading.Event(), threading.Event()

    def slow() -> str:
        slow_started.set()
        release.wait(PATIENCE_S)
        return "slow"

    first = threading.Thread(
        target=lambda: submits.once("a", slow, caller="t", route="POST /v1/runs", body="{}")
    )
    first.start()
    try:
        assert slow_started.wait(PATIENCE_S)
        # Another key answers while the first key's call is still running.
        assert (
            submits.once("b", lambda: "fast", caller="t", route="POST /v1/runs", body="{}")
            == "fast"
        )
        assert first.is_alive()
    finally:
        release.set()
        first.join(PATIENCE_S)
    # The first key's retry gets its answer; with another body it is refused.
    assert (
        submits.once("a", lambda: "again", caller="t", route="POST /v1/runs", body="{}") == "slow"
    )
    with pytest.raises(Refused, match="another body"):
        submits.once("a", lambda: "x", caller="t", route="POST /v1/runs", body="{1}")


def test_a_retry_after_the_server_restarted_gets_the_first_run(tmp_path: Path) -> None:
    dataset = tmp_path / "rows.csv"
    dataset.write_text("text\nfirst\nsecond\n")
    spec = {
        "name": "once",
        "dataset": str(dataset),
        "variants": [
            {
                "name": "v",
                "model": "sim:fast",
                "params": {"max_tokens": 8},
                "messages": [{"role": "user", "content": "Say {{ text }}"}],
            }
        ],
    }
    db = tmp_path / "served.duckdb"
    served = Served(db)
    try:
        status, first = served.call("POST", "/v1/runs", {"spec": spec}, key="retry-1")
        assert status == 201, first
    finally:
        served.stop()
    served = Served(db)  # a new process, a new owner token: the key is still the owner's
    try:
        status, again = served.call("POST", "/v1/runs", {"spec": spec}, key="retry-1")
        assert status == 201 and again["run_id"] == first["run_id"], (first, again)
        status, runs = served.call("GET", "/v1/runs")
        assert [r["run_id"] for r in runs] == [first["run_id"]]
        changed = {**spec, "name": "other"}
        status, refused = served.call("POST", "/v1/runs", {"spec": changed}, key="retry-1")
        assert status == 422 and "another body" in refused["error"]
    finally:
        served.stop()
