"""Long conversations in bounded memory (issue 38, item 3): a replay's plan stores each
turn's part of its session's history, not the whole history before it, and each turn's
history is put together when it is sent. A session far longer than the old plan could
hold (its rows outgrew DuckDB's working memory) replays under either history mode;
each turn is still sent exactly the messages before it (logged, or with the model's
answers); a paused replay resumed by a new engine reads a session's earlier turns from
its plan; context shards are cut as a session grows, each message looked at once."""

from __future__ import annotations

import asyncio
import csv
import io
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from promptlab.conversations.replay import (
    BEFORE_KEY,
    CONVERSATION_KEY,
    TURN_KEY,
    TURN_NO_KEY,
    generated_history,
    with_conversation,
)
from promptlab.conversations.shards import ShardCutter, shard_history
from promptlab.data.datasets import DatasetStore
from promptlab.engine import Engine, parse_spec
from promptlab.engine.send.histories import SessionHistories
from promptlab.engine.testing import ScriptedProvider
from promptlab.providers.base import CompletionRequest
from promptlab.providers.config import EndpointConfig
from promptlab.records import PendingItem
from promptlab.records.datasets import DEFAULT_CONVERSATION
from promptlab.store import Store
from promptlab.store.connection import WORKING_MEMORY_BYTES
from tests.test_conversations import write

#: A window that holds any session here whole: every turn is sent its whole history.
ENDPOINTS = {"fake": EndpointConfig("fake", "openai", rpm=6_000_000, context_windows={"m1": 10**9})}
SYSTEM = "You are a support agent."
AGENT = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "{{ content }}"}]


def spec(history: str) -> dict[str, Any]:
    return {
        "name": "long",
        "dataset": "chats",
        "history": history,
        "variants": [{"name": "v", "model": "fake:m1", "messages": AGENT}],
    }


def long_log(turns: int, short_sessions: int = 0, words: int = 1) -> list[list[str]]:
    """One long session (a system message and a greeting first, a customer who writes
    twice in a row now and then) after `short_sessions` sessions of three turns."""
    filler = " ".join(["lorem ipsum dolor sit amet"] * words)
    rows = [["session_id", "turn", "role", "content"]]
    for s in range(short_sessions):
        for t in range(3):
            rows.append([f"short{s}", str(2 * t), "user", f"short {s} question {t}"])
            rows.append([f"short{s}", str(2 * t + 1), "assistant", f"short {s} answer {t}"])
    rows.append(["long", "0", "system", "Logged system prompt."])
    rows.append(["long", "1", "assistant", "Hello! How can I help?"])
    order = 2
    for t in range(turns):
        rows.append(["long", str(order), "user", f"question {t} {filler}"])
        order += 1
        if t % 7 != 3:  # every seventh, the customer writes again before an answer
            rows.append(["long", str(order), "assistant", f"answer {t} {filler}"])
            order += 1
    return rows


def as_csv(rows: list[list[str]]) -> str:
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    return out.getvalue()


def expected_requests(
    rows: list[list[str]], outputs: dict[int, str] | None
) -> dict[int, list[dict[str, str]]]:
    """Per row index (user turn, in plan order): the messages its request must carry,
    made from the log directly: the conversation before it (logged, or with the model's
    stored `outputs` in place of the logged answers), joined as the engine joins it."""
    expected: dict[int, list[dict[str, str]]] = {}
    history: list[dict[str, str]] = []
    session, answers, row = None, [], 0
    for name, _order, role, content in rows[1:]:
        if name != session:
            session, history, answers = name, [], []
        if role == "system":
            continue
        if role == "user":
            rendered = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": content}]
            before = generated_history(history, answers) if outputs is not None else history
            expected[row] = with_conversation(rendered, {CONVERSATION_KEY: before})
            if outputs is not None:
                answers.append(outputs[row])
            row += 1
        history.append({"role": role, "content": content, "at": _order})
    return expected


def recording() -> tuple[ScriptedProvider, dict[str, list[dict[str, str]]]]:
    sent: dict[str, list[dict[str, str]]] = {}

    def answer(request: CompletionRequest) -> str:
        sent[request.request_id or ""] = [dict(m) for m in request.messages]
        return f"model answer to {request.messages[-1]['content'][:12]}"

    return ScriptedProvider(answer=answer), sent


def results(store: Store, run_id: str) -> dict[str, tuple[int, str | None, str]]:
    with store.read() as cur:
        found = cur.execute(
            "SELECT idempotency_key, row_index, output_text, status FROM results WHERE run_id = ?",
            [run_id],
        ).fetchall()
    return {key: (int(row), output, status) for key, row, output, status in found}


@pytest.mark.parametrize("history", ["logged", "generated"])
def test_a_session_past_what_the_old_plan_could_hold_replays_each_turn_exactly(
    tmp_path: Path, db_path: Path, history: str
) -> None:
    """600 turns of about 150 characters after 20 short sessions: with every turn's
    history in its row the plan came to about 60 MB of JSON, past the store's working
    memory (the issue's 500 turns failed with `Out of Memory Error` and 0 items, under
    either history mode). Now each row holds its own part, and every request carries
    exactly the conversation before its turn."""
    rows = long_log(600, short_sessions=20, words=5)
    provider, sent = recording()
    with Store(db_path) as store:
        DatasetStore(store).import_file(
            write(tmp_path, as_csv(rows)), "chats", author="t", conversation=DEFAULT_CONVERSATION
        )
        with Engine(store, endpoints=ENDPOINTS, provider_factory=lambda _cfg: provider) as eng:
            run_id = eng.submit(parse_spec(spec(history)))
            progress = eng.wait(run_id, timeout=600)
        assert progress.status == "completed", progress.reason
        assert progress.succeeded == 660 and not progress.failed
        with store.read() as cur:
            stored, largest = cur.execute(
                "SELECT sum(length(row_values)), max(length(row_values)) FROM run_rows "
                "WHERE run_id = ?",
                [run_id],
            ).fetchone() or (0, 0)
        finished = results(store, run_id)
    # What the plan stores per turn is its own part: bounded, whatever the session's length.
    assert largest < 1_000 and stored < 660 * 1_000 < WORKING_MEMORY_BYTES
    outputs = {row: output or "" for row, output, _ in finished.values()}
    expected = expected_requests(rows, outputs if history == "generated" else None)
    assert len(sent) == 660
    for key, (row, _output, status) in finished.items():
        assert status == "succeeded"
        assert sent[key] == expected[row], f"row {row}"


def test_a_paused_long_session_resumed_by_a_new_engine_reads_its_earlier_turns_back(
    tmp_path: Path, db_path: Path
) -> None:
    rows = long_log(120)
    provider, sent = recording()
    answer = provider.answer
    assert answer is not None
    enough = threading.Event()

    def hold_after_forty(request: CompletionRequest) -> str:
        text = answer(request)
        if len(sent) >= 40 and not enough.is_set():
            provider.hold_requests()  # what comes next waits in flight
            enough.set()
        return text

    provider.answer = hold_after_forty
    with Store(db_path) as store:
        DatasetStore(store).import_file(
            write(tmp_path, as_csv(rows)), "chats", author="t", conversation=DEFAULT_CONVERSATION
        )
        with Engine(store, endpoints=ENDPOINTS, provider_factory=lambda _cfg: provider) as eng:
            run_id = eng.submit(parse_spec(spec("logged")))
            assert enough.wait(60)
            eng.pause(run_id)
            provider.release_requests()
            paused = eng.wait(run_id, timeout=60)
        assert paused.status == "paused" and 40 <= paused.succeeded < 120
        before = dict(sent)
        provider.answer = answer
        with Engine(store, endpoints=ENDPOINTS, provider_factory=lambda _cfg: provider) as eng:
            eng.resume(run_id)
            assert eng.wait(run_id, timeout=120).status == "completed"
        finished = results(store, run_id)
    assert len(finished) == 120 and all(n == 1 for n in provider.calls.values())
    resumed = {key for key in sent if key not in before}
    assert resumed and min(finished[k][0] for k in resumed) > 0  # it went on mid-session
    expected = expected_requests(rows, None)
    for key, (row, _output, _status) in finished.items():
        assert sent[key] == expected[row], f"row {row}"


def turn_item(row: int, turn: int, before: list[dict[str, str]], text: str) -> PendingItem:
    values = {
        "__session__": "s",
        TURN_NO_KEY: turn,
        BEFORE_KEY: before,
        TURN_KEY: {"role": "user", "content": text, "at": str(row)},
    }
    return PendingItem(f"k{row}", row, row, 0, 0, 0, values)


def test_histories_read_a_session_s_earlier_turns_from_the_plan_once_and_drop_old_ones() -> None:
    plan = [
        turn_item(
            r, r, [{"role": "assistant", "content": f"a{r - 1}", "at": ""}] if r else [], f"u{r}"
        )
        for r in range(10)
    ]
    loads: list[tuple[int, int]] = []

    async def load(first: int, last: int) -> list[dict[str, Any]]:
        loads.append((first, last))
        return [dict(plan[r].values) for r in range(first, last + 1)]

    async def scenario() -> None:
        histories = SessionHistories(load, max_messages=10)
        logged = await histories.history(plan[6])  # a resumed session: turns 0-5 are read
        assert logged is not None
        assert [m["content"] for m in logged.history] == [
            "u0",
            "a0",
            "u1",
            "a1",
            "u2",
            "a2",
            "u3",
            "a3",
            "u4",
            "a4",
            "u5",
            "a5",
        ]
        assert loads == [(0, 5)]
        later = await histories.history(plan[7])
        assert later is not None and len(later.history) == 14 and loads == [(0, 5)]
        again = await histories.history(plan[3])  # an earlier turn: a view, nothing read
        assert again is not None and [m["content"] for m in again.history][-1] == "a2"
        other = turn_item(100, 0, [], "other session")
        await histories.history(other)  # over 10 messages: the long session is dropped
        assert len(histories) == 1 and histories.held == 1
        back = await histories.history(plan[8])
        assert back is not None and len(back.history) == 16 and loads[-1] == (0, 7)

    asyncio.run(scenario())


def test_a_cutter_kept_up_turn_by_turn_cuts_every_prefix_as_a_fresh_cut_does() -> None:
    def tokens_of(message: dict[str, str]) -> int:
        return len(message["content"].split())

    history: list[dict[str, str]] = []
    for t in range(300):
        words = 3 + (t * 7) % 11
        topic = "by the way, " if t % 23 == 0 else ""
        history.append({"role": "user", "content": topic + " ".join(["ask"] * words), "at": ""})
        history.append({"role": "assistant", "content": " ".join(["say"] * (t % 5 + 1)), "at": ""})
    cutter = ShardCutter(60, tokens_of, later_budget=45)
    for turn in range(0, len(history), 2):
        cutter.extend(history, turn + 1)
        fresh = shard_history(history[: turn + 1], 60, tokens_of, later_budget=45)
        assert cutter.shards(turn + 1) == fresh
        count = cutter.count(turn + 1)
        assert [cutter.shard(k, turn + 1) for k in range(count)] == fresh
    assert cutter.seen == len(history) - 1 and len(fresh) > 10


def test_a_summary_prompt_that_does_not_render_fails_its_turns_as_no_summary_and_a_resume_retries(
    tmp_path: Path, db_path: Path
) -> None:
    """The README: a summary that cannot be made fails the turns that need it as
    `no_summary`, and a resume sends them again. A summary prompt that does not render
    (here it reads a field of `summary`, which is text) is such a summary: its turns
    failed as `invalid_input` before, which a resume leaves as they are."""
    from promptlab.prompts.registry import Registry
    from promptlab.prompts.templates import Template
    from tests.test_conversations_shards import ENDPOINTS as WINDOWED
    from tests.test_conversations_shards import long_log as sharded_log
    from tests.test_conversations_shards import spec as sharded_spec

    provider = ScriptedProvider()
    with Store(db_path) as store:
        broken = Template.build(
            [{"role": "user", "content": "Summarize {{ summary.text }}\n{{ conversation }}"}],
            params={"model": "fake:m1", "max_tokens": 20},
        )
        saved = Registry(store).save_version("recap", broken, author="t")
        Registry(store).set_label("recap", f"recap@{saved.version.semver}", "production", actor="t")
        DatasetStore(store).import_file(
            write(tmp_path, sharded_log(sessions=1)),
            "chats",
            author="t",
            conversation=DEFAULT_CONVERSATION,
        )
        extra = {"shards": {"summary": "recap@production"}}
        provider.hold_requests()  # turns that fit are held in flight; the rest fail first
        with Engine(store, endpoints=WINDOWED, provider_factory=lambda _cfg: provider) as eng:
            run_id = eng.submit(parse_spec(sharded_spec(**extra)))
            deadline = time.monotonic() + 60
            while not settled(eng.status(run_id)):
                assert time.monotonic() < deadline
                time.sleep(0.01)
            eng.pause(run_id)
            provider.release_requests()
            assert eng.wait(run_id, timeout=60).status == "paused"
            failed = failures(store, run_id)
            assert failed and {kind for kind, _message, _at in failed.values()} == {"no_summary"}
            assert all("did not render" in message for _kind, message, _at in failed.values())
            eng.resume(run_id)
            resumed = eng.wait(run_id, timeout=60)
        again = failures(store, run_id)
    # Resumed: its no_summary turns were taken up again (and fail again: the prompt is
    # pinned to the same version); the turns that succeeded were not sent again.
    assert resumed.status == "completed" and again.keys() == failed.keys()
    assert all(again[key][2] > failed[key][2] for key in failed)
    assert all(n == 1 for n in provider.calls.values())


def settled(progress: Any) -> bool:
    """Every turn sent (and held in flight) or failed, and some failed."""
    return bool(progress.failed) and progress.failed + progress.in_flight == progress.total


def failures(store: Store, run_id: str) -> dict[str, tuple[str, str, Any]]:
    """The run's failed results: key -> (error kind, message, finished at)."""
    with store.read() as cur:
        rows = cur.execute(
            "SELECT idempotency_key, error_kind, error_message, finished_at FROM results "
            "WHERE run_id = ? AND status = 'failed'",
            [run_id],
        ).fetchall()
    return {key: (kind, message, at) for key, kind, message, at in rows}
