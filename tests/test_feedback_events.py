"""Outcomes as events, live (issue 56, item 3): `POST /v1/feedback/events` against a real
`promptlab serve` over loopback on a real DuckDB file. Events about gateway calls (their
trace) or a version and unit, one or a batch, stored once per event id; a bad event
refuses the batch naming it; `completed` events move completion and named scores show
per version, in the log metrics and in the logs comparison the Compare page reads.

The gateway's calls are production log rows with a trace; they are written here as the
gateway writes them, before the server starts."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from promptlab.config import Settings
from promptlab.data.feedback_events import MAX_EVENTS, events_of
from promptlab.errors import FeedbackError
from promptlab.store import Store
from promptlab.workbench import Workbench
from tests.test_server import Served

A, B = "ticket-triage@1.0.0", "ticket-triage@1.1.0"
#: The gateway calls written before the server starts: trace -> (version, unit).
CALLS = {
    "tr_a1": (A, "ua1"),
    "tr_a2": (A, "ua2"),
    "tr_a3": (A, "ua3"),
    "tr_a4": (A, "ua4"),
    "tr_b1": (B, "ub1"),
    "tr_b2": (B, "ub2"),
}
ROUTE = "/v1/feedback/events"


@dataclass
class Live:
    served: Served
    db: Path
    #: Each version's id, by reference.
    ids: dict[str, str]
    #: A token per role: viewer, gateway.
    tokens: dict[str, str]

    def send(self, body: Any, token: str = "") -> tuple[int, Any]:
        return self.served.call("POST", ROUTE, body, token=token or self.tokens["gateway"])

    def logs(self, ref: str) -> dict[str, Any]:
        """The version's log metrics row, as the server answers it."""
        status, rows = self.served.call("GET", "/v1/analysis/log-metrics")
        assert status == 200, rows
        return next(r for r in rows if r["prompt_version_id"] == self.ids[ref])

    def compared(self) -> dict[str, dict[str, Any]]:
        """The logs comparison of B against A (the Compare page's), its rows by metric."""
        path = f"/v1/analysis/compare?a={A}&b={B}&logs=true"
        status, comparison = self.served.call("GET", path)
        assert status == 200, comparison
        return {row["metric"]: row for row in comparison["rows"]}


@pytest.fixture
def live(db_path: Path) -> Iterator[Live]:
    with Workbench.open(Settings.from_env().with_db(db_path)) as wb:
        wb.demo.load()
        ids = {ref: wb.prompts.resolve(ref).id for ref in (A, B)}
        tokens = {role: wb.tokens.create(f"{role}-app", role)[1] for role in ("viewer", "gateway")}
        with wb.store.transaction() as tx:
            for trace, (ref, unit) in CALLS.items():
                tx.execute(
                    "INSERT INTO production_logs (prompt_version_id, unit_id, latency_ms, "
                    "event_time, source, imported_at, trace, experiment, variant) "
                    "VALUES (?, ?, 120, now(), 'gateway', now(), ?, 'triage', ?)",
                    [ids[ref], unit, trace, "control" if ref == A else "treatment"],
                )
    served = Served(db_path)
    try:
        yield Live(served, db_path, ids, tokens)
    finally:
        served.stop()


def stored(db: Path) -> list[tuple[Any, ...]]:
    """Every live feedback row, by event id (read once the server has stopped)."""
    with Store(db) as store, store.read() as cur:
        return cur.execute(
            "SELECT event_id, trace, prompt_version_id, variant, unit_id, kind, score_name, "
            "value, source FROM feedback WHERE event_id IS NOT NULL ORDER BY event_id"
        ).fetchall()


def test_one_event_and_a_batch_are_stored_once_per_event_id(live: Live) -> None:
    assert live.send({"id": "ev-1", "trace": "tr_a1", "kind": "impression"}) == (
        200,
        {"accepted": 1, "duplicates": 0},
    )
    batch = {
        "events": [
            {"id": "ev-1", "trace": "tr_a1", "kind": "impression"},  # sent before
            {"id": "ev-2", "trace": "tr_a1", "kind": "click"},
            {"id": "ev-3", "version": A, "unit": "ua2", "kind": "impression"},
            {"id": "ev-3", "version": A, "unit": "ua2", "kind": "impression"},  # twice here
        ]
    }
    assert live.send(batch) == (200, {"accepted": 2, "duplicates": 2})
    assert live.send(batch) == (200, {"accepted": 0, "duplicates": 4})  # a retried send

    row = live.logs(A)
    assert (row["click_known"], row["clicks"]) == (2, 1)  # two impressions, one click
    status, events = live.served.call("GET", "/v1/audit/events?kind=feedback.received")
    assert status == 200
    assert [e["payload"]["events"] for e in events] == [1, 2]  # one per batch that stored
    assert {e["actor"] for e in events} == {"gateway-app"}

    live.served.stop()
    a = live.ids[A]
    assert stored(live.db) == [
        ("ev-1", "tr_a1", a, "control", "ua1", "impression", None, 1.0, "live"),
        ("ev-2", "tr_a1", a, "control", "ua1", "click", None, 1.0, "live"),
        ("ev-3", None, a, None, "ua2", "impression", None, 1.0, "live"),
    ]


def test_a_bad_event_refuses_the_whole_batch_naming_it(live: Live) -> None:
    good = [
        {"id": "ok-1", "trace": "tr_a1", "kind": "completed"},
        {"id": "ok-2", "version": A, "unit": "ua2", "kind": "thumbs_up"},
    ]
    bad = {"id": "bad", "trace": "tr_nowhere", "kind": "click"}
    status, answer = live.send({"events": [*good, bad]})
    assert (status, answer["error"]) == (422, "events[2].trace: no call with trace tr_nowhere")
    status, answer = live.send({"events": [*good, {**bad, "trace": "tr_a2", "kind": "like"}]})
    assert status == 422 and answer["error"].startswith("events[2].kind: 'like' is not one of")
    # Nothing of either batch was stored: the good events are new when sent alone.
    assert live.logs(A)["completed"] == 0
    assert live.send({"events": good}) == (200, {"accepted": 2, "duplicates": 0})
    assert live.logs(A)["completed"] == 1


def test_a_gateway_token_may_send_events_and_a_viewer_may_not(live: Live) -> None:
    event = {"id": "role-1", "trace": "tr_b1", "kind": "thumbs_down"}
    status, answer = live.send(event, token=live.tokens["viewer"])
    assert status == 403, answer
    assert live.send(event, token=live.tokens["gateway"]) == (200, {"accepted": 1, "duplicates": 0})
    status, _ = live.served.call("GET", "/v1/runs", token=live.tokens["gateway"])
    assert status == 403  # an application's token reaches the gateway and events only


def test_completed_events_move_the_completion_rate_per_version(live: Live) -> None:
    # Live calls count as not completed until an event says so.
    before = live.logs(A)
    assert (before["completion_known"], before["completed"]) == (4, 0)
    assert live.compared()["completion rate"]["control_value"] == 0.0

    events = [
        {"id": "done-1", "trace": "tr_a1", "kind": "completed"},
        {"id": "done-2", "trace": "tr_a1", "kind": "completed"},  # the same call again
        {"id": "done-3", "version": A, "unit": "ua3", "kind": "completed"},
        {"id": "done-4", "trace": "tr_b1", "kind": "completed"},
    ]
    assert live.send({"events": events}) == (200, {"accepted": 4, "duplicates": 0})
    after_a, after_b = live.logs(A), live.logs(B)
    assert (after_a["completion_known"], after_a["completed"]) == (4, 2)
    assert (after_b["completion_known"], after_b["completed"]) == (2, 1)
    row = live.compared()["completion rate"]
    assert (row["control_value"], row["variant_value"]) == (0.5, 0.5)
    assert (row["n_control"], row["n_variant"]) == (4, 2)  # per unit: one call each


def test_a_named_score_has_its_mean_per_version(live: Live) -> None:
    scores = [
        {"id": "s-1", "trace": "tr_a1", "kind": "score", "name": "helpful", "value": 4},
        {"id": "s-2", "trace": "tr_a2", "kind": "score", "name": "helpful", "value": 2.5},
        {"id": "s-3", "version": A, "unit": "ua2", "kind": "score", "name": "helpful", "value": 1},
        {"id": "s-4", "trace": "tr_b1", "kind": "score", "name": "helpful", "value": 5},
        {"id": "s-5", "trace": "tr_b1", "kind": "score", "name": "tone", "value": 0.25},
    ]
    assert live.send({"events": scores}) == (200, {"accepted": 5, "duplicates": 0})
    assert live.logs(A)["scores"] == [{"name": "helpful", "scores": 3, "units": 2, "mean": 2.5}]
    assert live.logs(B)["scores"] == [
        {"name": "helpful", "scores": 1, "units": 1, "mean": 5.0},
        {"name": "tone", "scores": 1, "units": 1, "mean": 0.25},
    ]
    row = live.compared()["score: helpful"]
    # Per unit: ua1 scored 4, ua2 scored 2.5 and 1 (a ratio of sums: 7.5 over 3 scores).
    assert (row["control_value"], row["variant_value"]) == (2.5, 5.0)
    assert (row["n_control"], row["n_variant"]) == (2, 1)  # the units scored
    # `promptlab metrics --live` prints them (through the server, as any command does).
    printed = subprocess.run(
        [sys.executable, "-m", "promptlab", "--db", str(live.db), "metrics", "--live"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "ticket-triage@1.0.0  helpful  2.500       3      2" in printed
    assert "ticket-triage@1.1.0  tone     0.250       1      1" in printed


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ([], 'body: expected an event object or {"events": [...]}'),
        (
            {"trace": "tr_a1", "kind": "click"},
            "id: required (the event's id (its idempotency key))",
        ),
        ({"id": "x" * 201, "trace": "t", "kind": "click"}, "id: a text of 1 to 200 characters"),
        ({"id": "e", "kind": "click"}, "trace: required, or a version and a unit"),
        ({"id": "e", "version": A, "kind": "click"}, "unit: required with a version"),
        ({"id": "e", "trace": "t", "unit": "u", "kind": "click"}, "unit: an event names a trace"),
        ({"id": "e", "trace": "t", "kind": "score", "value": 1}, "name: required (a score's name)"),
        ({"id": "e", "trace": "t", "kind": "score", "name": "n"}, "value: required"),
        ({"id": "e", "trace": "t", "kind": "click", "name": "n"}, "name: only a score has a name"),
        ({"id": "e", "trace": "t", "kind": "click", "value": True}, "value: True is not a finite"),
        ({"id": "e", "trace": "t", "kind": "click", "time": "noon"}, "time: 'noon' is not a time"),
        ({"id": "e", "trace": "t", "kind": "click", "unit_id": "u"}, "unit_id: not an event field"),
        ({"id": "e", "version": A, "unit": "Bearer abcdefghijkl", "kind": "click"}, "unit: looks"),
        ({"events": [{"id": "e", "trace": "t", "kind": "x"}]}, "events[0].kind: 'x' is not one"),
        ({"events": [{"id": "e", "trace": "t", "kind": "click"}, 3]}, "events[1]: expected an"),
        ({"events": [], "source": "x"}, 'source: a batch is {"events": [...]} and nothing else'),
        ({"events": [{"id": "e", "trace": "t", "kind": "click"}] * (MAX_EVENTS + 1)}, "events: a"),
    ],
)
def test_each_bad_field_is_named_in_one_line(body: Any, error: str) -> None:
    with pytest.raises(FeedbackError) as caught:
        events_of(body)
    assert str(caught.value).startswith(error)
    assert "\n" not in str(caught.value)


def test_an_event_time_is_utc_unless_it_says_otherwise() -> None:
    naive, offset = events_of(
        {
            "events": [
                {"id": "1", "trace": "t", "kind": "click", "time": "2026-11-01T09:30:00"},
                {"id": "2", "trace": "t", "kind": "click", "time": "2026-11-01T09:30:00+02:00"},
            ]
        }
    )
    assert naive.time is not None and naive.time.isoformat() == "2026-11-01T09:30:00+00:00"
    assert offset.time is not None and offset.time.isoformat() == "2026-11-01T07:30:00+00:00"
    assert naive.value == 1.0 and naive.where == "events[0]"
