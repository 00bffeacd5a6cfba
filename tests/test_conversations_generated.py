"""`history: generated` (issue 27, item 2): a replayed session's turns are sent in order,
each with the model's own earlier answers; sessions run side by side under the one
limiter; a turn after a failed one is not sent; a killed run resumes mid-session with
the answers it stored, sending no finished turn again; the trace renders what was sent."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from promptlab.data.datasets import DatasetStore
from promptlab.engine import Engine, parse_spec
from promptlab.engine.testing import ScriptedProvider
from promptlab.errors import ErrorKind, ProviderError
from promptlab.fakellm.server import FakeLLMConfig, serve_in_thread
from promptlab.providers.base import CompletionRequest
from promptlab.records.datasets import DEFAULT_CONVERSATION
from promptlab.store import Store
from promptlab.workbench import Workbench
from tests.test_conversations import REPLAYED, write
from tests.test_run_dependencies import ENDPOINTS

AGENT = [
    {"role": "system", "content": "Agent for {{ session_id }}."},
    {"role": "user", "content": "{{ content }}"},
]


def generated_spec(**extra: Any) -> dict[str, Any]:
    return {
        "name": "generated",
        "dataset": "chats",
        "history": "generated",
        "variants": [{"name": "v", "model": "fake:m1", "messages": AGENT}],
        **extra,
    }


def replay(
    tmp_path: Path, db_path: Path, provider: ScriptedProvider, log: str = REPLAYED
) -> tuple[str, Any]:
    with Store(db_path) as store:
        DatasetStore(store).import_file(
            write(tmp_path, log), "chats", author="t", conversation=DEFAULT_CONVERSATION
        )
        with Engine(store, endpoints=ENDPOINTS, provider_factory=lambda _cfg: provider) as eng:
            run_id = eng.submit(parse_spec(generated_spec()))
            return run_id, eng.wait(run_id, timeout=60)


def test_each_turn_is_sent_with_the_model_s_own_earlier_answers(
    tmp_path: Path, db_path: Path
) -> None:
    sent: dict[str, list[dict[str, str]]] = {}
    order: list[str] = []

    def answer(request: CompletionRequest) -> str:
        turn = request.messages[-1]["content"]
        sent[turn] = [dict(m) for m in request.messages]
        order.append(turn)
        return f"model on {turn!r}"

    provider = ScriptedProvider(answer=answer, latency_s=0.05)
    _run_id, progress = replay(tmp_path, db_path, provider)
    assert progress.status == "completed" and progress.succeeded == 6
    system = {"role": "system", "content": "Agent for s1."}
    assert sent["The March one."] == [
        system,
        {"role": "user", "content": "My invoice is wrong."},
        {"role": "assistant", "content": "model on 'My invoice is wrong.'"},  # not the log's
        {"role": "user", "content": "The March one."},
    ]
    # A customer who wrote twice is two turns, each answered by the model.
    assert sent["Never mind."][1:] == [
        {"role": "user", "content": "Hello?"},
        {"role": "assistant", "content": "model on 'Hello?'"},
        {"role": "user", "content": "Anyone there?"},
        {"role": "assistant", "content": "model on 'Anyone there?'"},
        {"role": "user", "content": "Never mind."},
    ]
    # In order within a session, side by side across sessions.
    assert order.index("Hello?") < order.index("Anyone there?") < order.index("Never mind.")
    assert order.index("My invoice is wrong.") < order.index("The March one.")
    assert provider.max_in_flight > 1


def test_a_turn_after_a_failed_one_is_not_sent(tmp_path: Path, db_path: Path) -> None:
    def fault(request: CompletionRequest, _calls: int) -> ProviderError | None:
        if request.messages[-1]["content"] == "Anyone there?":
            return ProviderError(ErrorKind.BAD_REQUEST, "refused", status=400)
        return None

    provider = ScriptedProvider(fault=fault)
    run_id, progress = replay(tmp_path, db_path, provider)
    assert progress.status == "completed"
    with Store(db_path) as store, store.read() as cur:
        rows = cur.execute(
            "SELECT row_index, status, error_kind, error_message FROM results "
            "WHERE run_id = ? ORDER BY row_index",
            [run_id],
        ).fetchall()
    statuses = [(r[0], r[1], r[2]) for r in rows]
    assert statuses == [
        (0, "succeeded", None),
        (1, "succeeded", None),
        (2, "succeeded", None),
        (3, "succeeded", None),
        (4, "failed", "bad_request"),
        (5, "failed", "no_history"),
    ]
    assert rows[5][3] == (
        "turn 2 of session s3 has no answer, so turn 3 cannot be sent with the model's own "
        "history (history: generated)"
    )
    assert sum(provider.calls.values()) == 5  # "Never mind." was never sent


def test_the_trace_and_item_view_show_what_a_generated_turn_was_sent(
    tmp_path: Path, db_path: Path
) -> None:
    with Workbench.open() as wb:
        wb.datasets.import_file(
            write(tmp_path, REPLAYED), "chats", conversation=DEFAULT_CONVERSATION
        )
        spec = generated_spec(variants=[{"name": "v", "model": "sim:fast", "messages": AGENT}])
        run_id = wb.runs.start(wb.runs.spec_from_data(spec))
        assert wb.runs.wait(run_id, timeout=60).status == "completed"
        items = {r.row_index: r.key for r in wb.runs.items(run_id, limit=10).rows}
        outputs = [wb.runs.item(run_id, items[i]).detail.result for i in (3, 4)]
        trace = wb.audit.trace(items[5])  # "Never mind.", after "Hello?" and "Anyone there?"
        render = trace.details["render"]
        assert render["history_answers"] == [o.output_text for o in outputs if o is not None]
        assert render["prompt_matches"] and render["variables_match"]
        view = wb.runs.item(run_id, items[5])
        assert view.request.messages is not None
        assert [m["content"] for m in view.request.messages[1:]] == [
            "Hello?",
            render["history_answers"][0],
            "Anyone there?",
            render["history_answers"][1],
            "Never mind.",
        ]
        logged = wb.audit.trace(items[1])  # a logged replay's trace matches too (mended)
        assert logged.details["render"]["prompt_matches"]


def test_turns_waiting_for_their_session_are_held_not_sent_when_paused(
    tmp_path: Path, db_path: Path
) -> None:
    """Paused while first turns are in flight: the later turns stay pending, and a new
    engine (nothing in memory) resumes them with the answers the first turns stored."""
    log = "session_id,turn,role,content\n" + "".join(
        f"s{s},{t},user,s{s} turn {t}\n" for s in range(4) for t in range(3)
    )
    provider = ScriptedProvider(latency_s=0.2)
    with Store(db_path) as store:
        DatasetStore(store).import_file(
            write(tmp_path, log), "chats", author="t", conversation=DEFAULT_CONVERSATION
        )
        with Engine(store, endpoints=ENDPOINTS, provider_factory=lambda _cfg: provider) as eng:
            run_id = eng.submit(parse_spec(generated_spec()))
            deadline = time.monotonic() + 30
            while sum(provider.successes.values()) < 4 and time.monotonic() < deadline:
                time.sleep(0.01)
            eng.pause(run_id)
            paused = eng.wait(run_id, timeout=30)
        assert paused.status == "paused" and 4 <= paused.succeeded < 12
        sent_before = set(provider.successes)
        with Engine(store, endpoints=ENDPOINTS, provider_factory=lambda _cfg: provider) as eng:
            eng.resume(run_id)
            assert eng.wait(run_id, timeout=60).status == "completed"
        with store.read() as cur:
            outputs = dict(
                cur.execute(
                    "SELECT row_index, output_text FROM results WHERE run_id = ?", [run_id]
                ).fetchall()
            )
    assert len(outputs) == 12 and all(n == 1 for n in provider.calls.values())
    assert len(sent_before) < 12
    for session in range(4):
        last = outputs[session * 3 + 2]
        assert last == f"answer to s{session} turn 2"
    with Workbench.open() as wb:
        items = {r.row_index: r.key for r in wb.runs.items(run_id, limit=20).rows}
        for row in range(12):
            render = wb.audit.trace(items[row]).details["render"]
            turn = row % 3
            earlier = [outputs[row - turn + t] for t in range(turn)]
            assert render.get("history_answers", []) == earlier and render["prompt_matches"]


def test_a_killed_replay_resumes_mid_session_without_sending_a_finished_turn(
    tmp_path: Path, db_path: Path
) -> None:
    sessions, turns = 30, 6
    log = "session_id,turn,role,content\n" + "".join(
        f"c{s},{2 * t},user,question {t} of chat {s}\nc{s},{2 * t + 1},assistant,logged\n"
        for s in range(sessions)
        for t in range(turns)
    )
    db = str(db_path)
    with serve_in_thread(FakeLLMConfig(port=0, latency_ms=40)) as server:
        spec = {
            "name": "killed replay",
            "dataset": "chats",
            "history": "generated",
            "variants": [
                {
                    "name": "v",
                    "model": "fake:gpt-4o-mini",
                    "messages": AGENT,
                    "params": {"max_tokens": 16},
                }
            ],
            "endpoints": {
                "fake": {"kind": "openai", "base_url": server.openai_base_url, "concurrency": 8}
            },
        }
        path = tmp_path / "spec.yaml"
        path.write_text(yaml.safe_dump(spec))
        cli = [sys.executable, "-m", "promptlab", "--db", db]
        subprocess.run(
            [
                *cli,
                "dataset",
                "import",
                str(write(tmp_path, log)),
                "--name",
                "chats",
                "--conversation",
            ],
            check=True,
            capture_output=True,
        )
        child = subprocess.Popen(
            [*cli, "run", str(path), "--quiet"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=os.environ.copy(),
        )
        try:
            assert child.stdout is not None
            run_id = child.stdout.readline().split()[1]
            deadline = time.monotonic() + 120
            while server.stats()["successes"] < 70:
                assert child.poll() is None and time.monotonic() < deadline
                time.sleep(0.02)
            child.send_signal(signal.SIGKILL)
            child.wait(10)
        finally:
            if child.poll() is None:
                child.kill()
        with Store(db_path) as store:
            with store.read() as cur:
                stored_before = {
                    r[0]
                    for r in cur.execute(
                        "SELECT idempotency_key FROM results WHERE run_id = ?", [run_id]
                    ).fetchall()
                }
            assert 0 < len(stored_before) < sessions * turns
            with Engine(store) as engine:
                engine.resume(run_id)
                progress = engine.wait(run_id, timeout=120)
            assert progress.status == "completed", progress.reason
            assert progress.succeeded == sessions * turns
        stats = server.stats()
    assert not set(stats["duplicate_ids"]) & stored_before  # no finished turn sent again
    with Workbench.open() as wb:
        rows = wb.runs.items(run_id, limit=500).rows
        assert len(rows) == sessions * turns
        outputs = {r.row_index: wb.runs.item(run_id, r.key).detail for r in rows}
        resumed_mid_session = 0
        for row in rows:
            turn = row.row_index % turns
            render = wb.audit.trace(row.key).details["render"]
            earlier = [outputs[row.row_index - turn + t].result for t in range(turn)]
            assert render.get("history_answers", []) == [e.output_text for e in earlier if e]
            assert render["prompt_matches"]
            if turn and row.key not in stored_before:
                previous = outputs[row.row_index - 1]
                resumed_mid_session += previous.key in stored_before
        assert resumed_mid_session > 0  # some turns went on from an answer stored before


def test_what_the_log_holds_before_the_first_user_message_is_kept() -> None:
    from promptlab.conversations.replay import generated_history

    greeting = {"role": "assistant", "content": "Hi! How can I help?", "at": "1"}
    logged = [
        greeting,
        {"role": "user", "content": "Hello", "at": "2"},
        {"role": "assistant", "content": "logged answer", "at": "3"},
    ]
    assert generated_history(logged, ["model answer"]) == [
        greeting,
        {"role": "user", "content": "Hello", "at": "2"},
        {"role": "assistant", "content": "model answer", "at": "2"},
    ]
    assert generated_history(logged[:1], []) == [greeting]  # the first turn's, as logged


def test_an_adapter_bug_fails_its_turn_and_a_resume_sends_the_session_on(
    tmp_path: Path, db_path: Path
) -> None:
    """A turn whose adapter raises gets its row (internal), so the session's next turn
    fails for want of it instead of waiting forever; a resume sends both again."""
    log = "session_id,turn,role,content\n" + "".join(
        f"s{s},{t},user,s{s} turn {t}\n" for s in range(2) for t in range(3)
    )
    provider = ScriptedProvider(latency_s=0.05)

    def answer(request: CompletionRequest) -> str:
        if (
            request.messages[-1]["content"] == "s0 turn 1"
            and provider.calls[request.request_id or ""] == 1
        ):
            provider.hold_requests()  # the rest waits, so the run can be paused
            raise RuntimeError("adapter bug")
        return f"answer to {request.messages[-1]['content']}"

    provider.answer = answer
    with Store(db_path) as store:
        DatasetStore(store).import_file(
            write(tmp_path, log), "chats", author="t", conversation=DEFAULT_CONVERSATION
        )
        with Engine(store, endpoints=ENDPOINTS, provider_factory=lambda _cfg: provider) as eng:
            run_id = eng.submit(parse_spec(generated_spec()))
            deadline = time.monotonic() + 30
            while eng.status(run_id).failed < 2:  # turn 1 internal, turn 2 no_history
                assert time.monotonic() < deadline
                time.sleep(0.01)
            eng.pause(run_id)
            provider.release_requests()
            assert eng.wait(run_id, timeout=30).status == "paused"
            with store.read() as cur:
                kinds = sorted(
                    r[0]
                    for r in cur.execute(
                        "SELECT error_kind FROM results WHERE run_id = ? AND status = 'failed'",
                        [run_id],
                    ).fetchall()
                )
            assert kinds == ["internal", "no_history"]
            eng.resume(run_id)
            done = eng.wait(run_id, timeout=60)
    assert done.status == "completed" and done.succeeded == 6
