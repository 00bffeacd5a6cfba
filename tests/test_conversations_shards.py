"""Context shards in a run (issue 27, item 3): a replayed turn whose history would not fit
the model's window is sent with its own shard, never refused for what sharding fits; a
turn too large for any shard fails naming it; shards are stored with session_id,
shard_id, seq_no and is_final and expire after their TTL; a versioned summary prompt
carries the shards before forward, once per shard, traced and resumed from the store."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from promptlab.data.datasets import DatasetStore
from promptlab.engine import Engine, parse_spec
from promptlab.engine.testing import ScriptedProvider
from promptlab.prompts.registry import Registry
from promptlab.prompts.templates import Template
from promptlab.providers.base import CompletionRequest
from promptlab.providers.config import EndpointConfig
from promptlab.providers.tokens import estimate_prompt_tokens
from promptlab.records.datasets import DEFAULT_CONVERSATION
from promptlab.store import Store
from promptlab.store.shards import ShardStore
from promptlab.workbench import Workbench
from tests.test_conversations import write

WINDOW = 300
MAX_TOKENS = 40
ENDPOINTS = {"fake": EndpointConfig("fake", "openai", rpm=60_000, context_windows={"m1": WINDOW})}
SYSTEM = {"role": "system", "content": "You are a support agent."}


def sentence(topic: str, n: int) -> str:
    return " ".join(f"{topic}{i % 7}" for i in range(n))


def long_log(sessions: int = 2, exchanges: int = 8) -> str:
    """Sessions of `exchanges` user/assistant pairs of about 25 tokens a message: the
    whole of one is several times the window."""
    rows = "".join(
        f"s{s},{2 * t},user,{sentence('question', 18)}\n"
        f"s{s},{2 * t + 1},assistant,{sentence('answer', 18)}\n"
        for s in range(sessions)
        for t in range(exchanges)
    )
    return "session_id,turn,role,content\n" + rows


def spec(**extra: Any) -> dict[str, Any]:
    return {
        "name": "sharded",
        "dataset": "chats",
        "history": "logged",
        "variants": [
            {
                "name": "v",
                "model": "fake:m1",
                "params": {"max_tokens": MAX_TOKENS},
                "messages": [SYSTEM, {"role": "user", "content": "{{ content }}"}],
            }
        ],
        **extra,
    }


def run(
    db_path: Path, tmp_path: Path, provider: ScriptedProvider, log: str, **extra: Any
) -> tuple[str, Any]:
    with Store(db_path) as store:
        if not any(d.name == "chats" for d in DatasetStore(store).list()):
            DatasetStore(store).import_file(
                write(tmp_path, log), "chats", author="t", conversation=DEFAULT_CONVERSATION
            )
        with Engine(store, endpoints=ENDPOINTS, provider_factory=lambda _cfg: provider) as eng:
            run_id = eng.submit(parse_spec(spec(**extra)))
            return run_id, eng.wait(run_id, timeout=60)


def recorder() -> tuple[ScriptedProvider, dict[str, list[dict[str, str]]]]:
    sent: dict[str, list[dict[str, str]]] = {}

    def answer(request: CompletionRequest) -> str:
        sent[request.request_id or ""] = [dict(m) for m in request.messages]
        if request.messages[-1]["content"].startswith("Summarize"):
            return f"recap {len(sent)}"
        return sentence("answer", 18)

    return ScriptedProvider(answer=answer), sent


@pytest.mark.parametrize("history", ["logged", "generated"])
def test_a_long_session_is_sent_in_shards_that_fit_and_nothing_is_refused(
    tmp_path: Path, db_path: Path, history: str
) -> None:
    provider, sent = recorder()
    run_id, progress = run(db_path, tmp_path, provider, long_log(), history=history)
    assert progress.status == "completed" and progress.succeeded == 16 and not progress.failed
    assert all(estimate_prompt_tokens(m) + MAX_TOKENS <= WINDOW for m in sent.values())
    with Store(db_path) as store:
        with store.read() as cur:
            results = cur.execute(
                "SELECT row_index, idempotency_key, shard_id FROM results WHERE run_id = ? "
                "ORDER BY row_index",
                [run_id],
            ).fetchall()
        shards = {s.shard_id: s for s in ShardStore(store).of_run(run_id, store.clock.now())}
    whole = [r for r in results if r[2] is None]
    cut = [r for r in results if r[2] is not None]
    assert whole and cut  # early turns fit whole; later ones are sent with their shard
    for row_index, key, shard_id in cut:
        shard = shards[shard_id]
        turn = row_index % 8
        # The request: the system message, the shard's messages, the turn; nothing older.
        assert len(sent[key]) == 1 + (2 * turn - shard.first_message) + 1
        assert shard.first_message <= 2 * turn <= shard.last_message
    for session in ("s0", "s1"):
        mine = sorted(
            (s for s in shards.values() if s.session_id == session), key=lambda s: s.seq_no
        )
        assert [s.seq_no for s in mine] == list(range(len(mine))) and len(mine) > 1
        assert [s.is_final for s in mine] == [False] * (len(mine) - 1) + [True]
        assert mine[0].first_message == 0 and mine[-1].last_message == 14  # its last turn
        assert all(s.cut in ("start", "type") for s in mine)
        assert all(a.first_message < b.first_message for a, b in zip(mine, mine[1:], strict=False))
    # The trace renders a sharded turn's request again from its row and its shard.
    with Workbench.open() as wb:
        render = wb.audit.trace(cut[-1][1]).details["render"]
    assert render["shard"]["id"] == cut[-1][2] and render["prompt_matches"]


def test_what_sharding_fits_is_not_refused_and_the_views_show_what_was_sent(
    tmp_path: Path, db_path: Path
) -> None:
    """The last turn's whole history is over the window (a plain row with it would be
    refused): it was sent with its shard, which the item view and the session view show."""
    from streamlit.testing.v1 import AppTest

    from promptlab.ui.resources import close_all
    from promptlab.views.item import item_request
    from tests.apptest_helpers import shown

    provider, sent = recorder()
    run_id, _ = run(db_path, tmp_path, provider, long_log(sessions=1))
    with Workbench.open() as wb:
        rows = {r.row_index: r.key for r in wb.runs.items(run_id, limit=20).rows}
        view = wb.runs.item(run_id, rows[7])
        whole = item_request(view.detail.variant, view.detail.row)
        turns = wb.runs.session(run_id, rows[7])
    assert whole.messages is not None and view.request.messages is not None
    assert estimate_prompt_tokens(whole.messages) + MAX_TOKENS > WINDOW  # whole: refused
    assert [dict(m) for m in view.request.messages] == sent[rows[7]]  # as sent: its shard
    assert len(sent[rows[7]]) < len(whole.messages)
    shards = [t.shard for t in turns]
    assert shards[0] is None and shards[-1] is not None and shards[-1] > 0
    close_all()
    at = AppTest.from_file(
        str(Path(__file__).parent.parent / "pages" / "runs.py"), default_timeout=30
    )
    at.query_params["run"] = run_id
    at.query_params["item"] = rows[7]
    at.run()
    assert not at.exception
    inputs = next(d.value for d in at.dataframe if "variable" in d.value.columns)
    assert list(inputs["variable"]) == ["session_id", "turn", "role", "content"]  # no internals
    whole_session = next(e for e in at.expander if e.label.startswith("The whole session"))
    captions = [shown(c.value) for c in whole_session.caption]
    assert f"shard {shards[-1] + 1} · this item" in captions[-1]
    assert "shard" not in captions[0] and "[open](?run=" in captions[0]


def test_a_turn_too_large_for_any_shard_fails_naming_the_shard(
    tmp_path: Path, db_path: Path
) -> None:
    log = (
        "session_id,turn,role,content\n"
        f"s0,1,user,{sentence('question', 18)}\ns0,2,assistant,{sentence('answer', 18)}\n"
        f"s0,3,user,{sentence('huge', 400)}\n"
        f"s1,1,user,{sentence('question', 18)}\n"
    )
    provider, _sent = recorder()
    run_id, progress = run(db_path, tmp_path, provider, log)
    assert progress.status == "completed" and (progress.succeeded, progress.failed) == (2, 1)
    with Store(db_path) as store, store.read() as cur:
        kind, message = cur.execute(
            "SELECT error_kind, error_message FROM results WHERE run_id = ? AND status = 'failed'",
            [run_id],
        ).fetchone()
    assert kind == "context_length"
    assert message.startswith(
        "fake context_length: session s0: shard 2 cannot hold message 3 "
        "of the session (the turn), ~"
    )
    assert message.endswith("-token window of fake:m1 (not sent)")


def summary_prompt(store: Store) -> str:
    template = Template.build(
        [{"role": "user", "content": "Summarize for an agent. {{ summary }}\n{{ conversation }}"}],
        params={"model": "fake:m1", "max_tokens": 20},
    )
    saved = Registry(store).save_version("recap", template, author="t")
    Registry(store).set_label("recap", f"recap@{saved.version.semver}", "production", actor="t")
    return saved.version.id


def test_a_summary_prompt_carries_the_shards_before_forward_once_per_shard(
    tmp_path: Path, db_path: Path
) -> None:
    with Store(db_path) as store:
        version_id = summary_prompt(store)
    provider, sent = recorder()
    run_id, progress = run(
        db_path, tmp_path, provider, long_log(), shards={"summary": "recap@production", "ttl": "2h"}
    )
    assert progress.status == "completed" and progress.succeeded == 16
    summaries = {k: v for k, v in sent.items() if k.endswith("-summary")}
    assert summaries and all(n == 1 for k, n in provider.calls.items() if k in summaries)
    with Store(db_path) as store:
        now = store.clock.now()
        shards = ShardStore(store).of_run(run_id, now)
        with store.read() as cur:
            stored = cur.execute("SELECT spec FROM runs WHERE run_id = ?", [run_id]).fetchone()
            results = cur.execute(
                "SELECT idempotency_key, shard_id FROM results WHERE run_id = ? AND "
                "shard_id IS NOT NULL",
                [run_id],
            ).fetchall()
    assert f'"summary": "recap@{version_id}"' in stored[0]  # pinned to the version
    carried = {s.shard_id: s for s in shards if s.seq_no > 0}
    assert len(summaries) == len(carried)  # one call per shard that carries one
    for shard in carried.values():
        assert shard.summary is not None and shard.summary.startswith("recap ")
        assert shard.summary_version_id == version_id and shard.summary_tokens
        # Each write (while a turn uses the shard) has it live for the TTL from then.
        assert 7200 <= (shard.expires_at - shard.created_at).total_seconds() < 7260
    key, shard_id = next((k, s) for k, s in results if s in carried)
    intro = "Summary of the conversation before this part:\n"
    assert sent[key][1]["content"].startswith(intro + str(carried[shard_id].summary))
    # The summary of shard 3 carries shard 2's: it was asked with it.
    third = next(s for s in carried.values() if s.seq_no == 2)
    second = next(s for s in carried.values() if s.seq_no == 1 and s.session_id == third.session_id)
    asked = sent[f"{third.shard_id}-summary"][0]["content"]
    assert second.summary is not None and second.summary in asked
    with Workbench.open() as wb:
        trace = wb.audit.trace(shard_id)  # the summary call, by the shard's id
        assert [e.kind for e in trace.events] == ["shard.summary"]
        assert trace.events[0].payload["summary_version_id"] == version_id
        render = wb.audit.trace(key).details["render"]
        assert render["shard"]["summary"] == carried[shard_id].summary
        assert render["prompt_matches"]


def test_a_summary_that_cannot_be_made_fails_its_turns_only(tmp_path: Path, db_path: Path) -> None:
    from promptlab.errors import ErrorKind, ProviderError

    with Store(db_path) as store:
        summary_prompt(store)

    def fault(request: CompletionRequest, _calls: int) -> ProviderError | None:
        if (request.request_id or "").endswith("-summary"):
            return ProviderError(ErrorKind.BAD_REQUEST, "no summaries today", status=400)
        return None

    provider = ScriptedProvider(fault=fault)
    run_id, progress = run(
        db_path, tmp_path, provider, long_log(sessions=1), shards={"summary": "recap@production"}
    )
    assert progress.status == "completed" and progress.succeeded and progress.failed
    with Store(db_path) as store, store.read() as cur:
        failed = cur.execute(
            "SELECT DISTINCT error_kind, error_message FROM results WHERE run_id = ? AND "
            "status = 'failed'",
            [run_id],
        ).fetchall()
    assert [kind for kind, _ in failed] == ["no_summary"]
    assert "could not be made" in failed[0][1] and "no summaries today" in failed[0][1]


def test_stored_shards_expire_after_their_ttl(tmp_path: Path, db_path: Path) -> None:
    provider, _sent = recorder()
    run_id, _ = run(db_path, tmp_path, provider, long_log(sessions=1), shards={"ttl": "1m"})
    with Store(db_path) as store:
        shards = ShardStore(store)
        live = shards.of_run(run_id, store.clock.now())
        assert live and all(60 <= (s.expires_at - s.created_at).total_seconds() < 120 for s in live)
        later = max(s.expires_at for s in live)
        assert shards.get(live[0].shard_id, later) is None  # expired: not read
        assert shards.of_run(run_id, later) == []
        with store.transaction() as tx:  # as if a minute had passed
            tx.execute("UPDATE shards SET expires_at = created_at - INTERVAL 1 SECOND")
    provider, _sent = recorder()
    other, _ = run(db_path, tmp_path, provider, long_log(sessions=1))
    with Store(db_path) as store, store.read() as cur:
        left = cur.execute("SELECT DISTINCT run_id FROM shards").fetchall()
    assert left == [(other,)]  # a run's start deleted the expired shards of the first


def test_a_resumed_replay_reads_its_summaries_back(tmp_path: Path, db_path: Path) -> None:
    """Paused right after a summary was made (generated history: the session's next
    turns are still to come), then resumed by a new engine: the turns after use the
    stored summary; none is asked twice."""
    provider, sent = recorder()
    answer = provider.answer
    assert answer is not None

    def hold_after_a_summary(request: CompletionRequest) -> str:
        if (request.request_id or "").endswith("-summary"):
            provider.hold_requests()  # what comes next waits in flight
        return answer(request)

    provider.answer = hold_after_a_summary
    with Store(db_path) as store:
        summary_prompt(store)
        DatasetStore(store).import_file(
            write(tmp_path, long_log(sessions=1)),
            "chats",
            author="t",
            conversation=DEFAULT_CONVERSATION,
        )
        extra = {"history": "generated", "shards": {"summary": "recap@production"}}
        with Engine(store, endpoints=ENDPOINTS, provider_factory=lambda _cfg: provider) as eng:
            run_id = eng.submit(parse_spec(spec(**extra)))
            deadline = time.monotonic() + 30
            while not any(k.endswith("-summary") for k in provider.successes):
                assert time.monotonic() < deadline
                time.sleep(0.01)
            eng.pause(run_id)
            provider.release_requests()
            assert eng.wait(run_id, timeout=30).status == "paused"
        made = {k for k in provider.successes if k.endswith("-summary")}
        provider.answer = answer
        sent.clear()
        with Engine(store, endpoints=ENDPOINTS, provider_factory=lambda _cfg: provider) as eng:
            eng.resume(run_id)
            assert eng.wait(run_id, timeout=60).status == "completed"
        with store.read() as cur:
            shard_of = dict(
                cur.execute(
                    "SELECT idempotency_key, shard_id FROM results WHERE run_id = ?", [run_id]
                ).fetchall()
            )
    (summary,) = made
    resumed_in_it = [k for k in sent if shard_of.get(k) == summary.removesuffix("-summary")]
    assert resumed_in_it  # turns sent after the resume carried the summary made before
    assert all(n == 1 for k, n in provider.calls.items() if k.endswith("-summary"))


def test_a_summary_call_that_raises_ends_its_turn_and_the_run_ends(
    tmp_path: Path, db_path: Path
) -> None:
    """An adapter that raises (not a provider's answer) on the summary call: the turn
    that needed it gets its row (internal), the session's next turns fail for want of
    it, and the run ends instead of waiting forever for them."""
    with Store(db_path) as store:
        summary_prompt(store)
    provider, _sent = recorder()
    answer = provider.answer
    assert answer is not None

    def broken_summaries(request: CompletionRequest) -> str:
        if (request.request_id or "").endswith("-summary"):
            raise RuntimeError("adapter bug")
        return answer(request)

    provider.answer = broken_summaries
    run_id, progress = run(
        db_path,
        tmp_path,
        provider,
        long_log(sessions=1),
        history="generated",
        shards={"summary": "recap@production"},
    )
    assert progress.status == "completed"
    with Store(db_path) as store, store.read() as cur:
        kinds = [
            r[0]
            for r in cur.execute(
                "SELECT error_kind FROM results WHERE run_id = ? ORDER BY row_index", [run_id]
            ).fetchall()
        ]
    first = kinds.index("internal")
    assert kinds[:first] == [None] * first and kinds[first + 1 :] == ["no_history"] * (
        len(kinds) - first - 1
    )


def test_summary_calls_are_throttled_at_the_gate_and_a_quota_stops_the_run(
    tmp_path: Path, db_path: Path
) -> None:
    """A 429 on a summary waits at the shared gate and is asked again; a quota refusal
    stops the run like any item's, failing no turn for it, and a resume goes on."""
    from promptlab.errors import ErrorKind, ProviderError

    with Store(db_path) as store:
        summary_prompt(store)
    refusals: list[str] = []

    def fault(request: CompletionRequest, calls: int) -> ProviderError | None:
        key = request.request_id or ""
        if not key.endswith("-summary"):
            return None
        if calls == 1:
            return ProviderError(ErrorKind.RATE_LIMIT, "slow down", status=429, retry_after_s=0.01)
        if len(refusals) < 1 and calls == 2 and "-summary" in key:
            refusals.append(key)
            return ProviderError(ErrorKind.QUOTA, "quota exhausted", status=429)
        return None

    provider, _sent = recorder()
    provider.fault = fault
    run_id, progress = run(
        db_path, tmp_path, provider, long_log(sessions=1), shards={"summary": "recap@production"}
    )
    assert progress.status == "failed" and "quota exhausted" in str(progress.reason)
    assert progress.failed == 0  # no turn failed for it: a resume sends them all
    with (
        Store(db_path) as store,
        Engine(store, endpoints=ENDPOINTS, provider_factory=lambda _cfg: provider) as eng,
    ):
        eng.resume(run_id)
        done = eng.wait(run_id, timeout=60)
    assert done.status == "completed" and done.succeeded == 8
    summaries = [k for k in provider.calls if k.endswith("-summary")]
    assert summaries and all(provider.calls[k] >= 2 for k in summaries)  # each 429 asked again


def test_a_replay_s_shards_are_listed_by_the_cli_the_facade_and_the_runs_page(
    tmp_path: Path, db_path: Path
) -> None:
    from click.testing import CliRunner
    from streamlit.testing.v1 import AppTest

    from promptlab.cli import main
    from promptlab.ui.resources import close_all

    provider, _sent = recorder()
    run_id, _ = run(db_path, tmp_path, provider, long_log())
    with Workbench.open() as wb:
        shards = wb.runs.shards(run_id)
        one = wb.runs.shards(run_id, "s1")
        with pytest.raises(Exception, match="run_nope"):
            wb.runs.shards("run_nope")
    assert {s.session_id for s in shards} == {"s0", "s1"} and {s.session_id for s in one} == {"s1"}
    printed = CliRunner().invoke(main, ["shards", run_id, "s1"]).output.splitlines()
    assert printed[0].startswith(f"run {run_id}: {len(one)} shards of session s1 in 1 session")
    assert printed[1].startswith("  s1  v#0  shard 1  messages 1-")
    assert printed[-1].split("  ")[3].endswith(" final")
    close_all()
    at = AppTest.from_file(
        str(Path(__file__).parent.parent / "pages" / "runs.py"), default_timeout=30
    )
    at.query_params["run"] = run_id
    at.run()
    assert not at.exception
    panel = next(e for e in at.expander if e.label.startswith("Context shards"))
    assert panel.label == f"Context shards ({len(shards)}, 0 carrying a summary)"
    table = panel.dataframe[0].value
    assert list(table["shard"]) == [s.seq_no + 1 for s in shards]
