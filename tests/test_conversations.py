"""Conversation logs (issue 27, item 1): imported from CSV, JSON Lines and Parquet with
their session, order, role and content columns; refused in one line naming the row when
a role is unknown, a session id blank, an order value unreadable or mixed, or two
messages of a session share one; listed by session and shown as a chat (CLI, page)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from streamlit.testing.v1 import AppTest

from promptlab.cli import main
from promptlab.errors import DatasetError
from promptlab.records import Conversation
from promptlab.records.datasets import DEFAULT_CONVERSATION
from promptlab.ui.resources import get_workbench
from promptlab.workbench import Workbench
from tests.apptest_helpers import shown

PAGE = str(Path(__file__).resolve().parent.parent / "pages" / "datasets.py")
CHATS = """session_id,turn,role,content
s1,1,system,You are a helpful support agent.
s1,2,User,My invoice is wrong.
s1,3,assistant,Sorry to hear that. Which invoice?
s1,10,user,The March one.
s2,1,user,How do I reset my password? My key is sk-live-0123456789abcdef0123
s2,2,assistant,Use the Forgot password link.
"""


def write(tmp_path: Path, text: str, name: str = "chats.csv") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_a_csv_log_is_read_by_session_in_order(tmp_path: Path, db_path: Path) -> None:
    with Workbench.open() as wb:
        info = wb.datasets.import_file(
            write(tmp_path, CHATS), "chats", conversation=DEFAULT_CONVERSATION
        )
        assert info.conversation == DEFAULT_CONVERSATION
        assert wb.datasets.get("chats").conversation == DEFAULT_CONVERSATION  # stored
        sessions = wb.datasets.sessions("chats")
        assert [(s.session, s.messages, s.user_turns, s.first, s.last) for s in sessions] == [
            ("s1", 4, 2, "1", "10"),
            ("s2", 2, 1, "1", "2"),
        ]
        turns = wb.datasets.session("chats", "s1")
        # Turn 10 after turn 3: ordered as numbers, not as text; roles in any case.
        assert [(t.order, t.role) for t in turns] == [
            ("1", "system"),
            ("2", "user"),
            ("3", "assistant"),
            ("10", "user"),
        ]
        (key_turn, _) = wb.datasets.session("chats", "s2")
        assert "sk-live-0123456789abcdef0123" not in key_turn.content  # masked as shown
        assert wb.datasets.session("chats", "nope") == []


def test_jsonl_and_parquet_logs_with_timestamps_and_other_column_names(
    tmp_path: Path, db_path: Path
) -> None:
    import duckdb

    lines = [
        {"chat": "a", "at": "2026-03-01T10:05:00Z", "who": "assistant", "text": "Hi!"},
        {"chat": "a", "at": "2026-03-01T10:00:00Z", "who": "user", "text": "Hello"},
        {"chat": "b", "at": "2026-03-01T09:00:00+01:00", "who": "user", "text": "Yo"},
    ]
    jsonl = write(tmp_path, "".join(json.dumps(x) + "\n" for x in lines), "log.jsonl")
    parquet = tmp_path / "log.parquet"
    duckdb.sql(f"COPY (SELECT * FROM read_json('{jsonl}')) TO '{parquet}' (FORMAT parquet)")
    log = Conversation(session="chat", order="at", role="who", content="text")
    with Workbench.open() as wb:
        for name, path in (("from-jsonl", jsonl), ("from-parquet", parquet)):
            wb.datasets.import_file(path, name, conversation=log)
            assert [t.content for t in wb.datasets.session(name, "a")] == ["Hello", "Hi!"]
            assert [s.session for s in wb.datasets.sessions(name)] == ["a", "b"]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            "s1,1,user,a\ns1,2,bot,b\n",
            "rows.csv, row 2, column role: unknown role 'bot' (expected system, user, assistant)",
        ),
        ("s1,1,user,a\n,2,user,b\n", "rows.csv, row 2, column session_id: no session id"),
        (
            "s1,1,user,a\ns1,soon,user,b\n",
            "rows.csv, row 2, column turn: 'soon' is neither a turn number nor a timestamp",
        ),
        (
            "s1,1,user,a\ns1,2026-01-01 10:00,user,b\n",
            "rows.csv, row 2, column turn: '2026-01-01 10:00' is not the kind of order value row 1",
        ),
        (
            "s1,1,user,a\ns2,1,user,b\ns1,1.0,assistant,c\n",
            "rows.csv, row 3, column turn: '1.0' again in the same session as row 1",
        ),
    ],
)
def test_a_broken_log_is_refused_in_one_line_and_nothing_is_kept(
    tmp_path: Path, db_path: Path, body: str, message: str
) -> None:
    path = write(tmp_path, "session_id,turn,role,content\n" + body, "rows.csv")
    with Workbench.open() as wb:
        with pytest.raises(DatasetError) as refused:
            wb.datasets.import_file(path, "rows", conversation=DEFAULT_CONVERSATION)
        assert str(refused.value).startswith(message) and "\n" not in str(refused.value)
        assert wb.datasets.list() == []


def test_turn_numbers_beyond_two_to_the_53_keep_their_order(tmp_path: Path, db_path: Path) -> None:
    """2^53 + 1 and 2^53 are one double: they were refused as the same turn. Integer turn
    numbers up to 28 digits are ordered exactly."""
    big = 2**53
    body = (
        f"s1,{big + 2},assistant,third\ns1,{big},user,first\ns1,{big + 1},assistant,"
        f"second\ns1,{big + 3},user,fourth\n"
    )
    path = write(tmp_path, "session_id,turn,role,content\n" + body, "rows.csv")
    with Workbench.open() as wb:
        wb.datasets.import_file(path, "big", conversation=DEFAULT_CONVERSATION)
        turns = wb.datasets.session("big", "s1")
        assert [t.content for t in turns] == ["first", "second", "third", "fourth"]
        (summary,) = wb.datasets.sessions("big")
        assert (summary.first, summary.last) == (str(big), str(big + 3))


def test_a_missing_column_or_a_plain_dataset_is_named(tmp_path: Path, db_path: Path) -> None:
    with Workbench.open() as wb:
        other = Conversation(session="sid", order="turn", role="role", content="content")
        with pytest.raises(DatasetError, match="the session column 'sid' is not a column"):
            wb.datasets.import_file(write(tmp_path, CHATS), "chats", conversation=other)
        wb.datasets.import_file(write(tmp_path, CHATS), "plain")
        with pytest.raises(DatasetError, match="'plain' is not a conversation log"):
            wb.datasets.sessions("plain")


def test_the_cli_imports_a_log_and_prints_a_session(tmp_path: Path, db_path: Path) -> None:
    cli = CliRunner()
    path = write(tmp_path, CHATS)
    imported = cli.invoke(
        main, ["dataset", "import", str(path), "--name", "chats", "--conversation"]
    )
    assert imported.exit_code == 0, imported.output
    listed = cli.invoke(main, ["dataset", "session", "chats"])
    assert listed.output.splitlines()[1].split() == ["s1", "4", "2", "1", "10"]
    shown = cli.invoke(main, ["dataset", "session", "chats", "s1"])
    assert shown.output.splitlines()[-1] == "[10] user: The March one."
    renamed = cli.invoke(
        main, ["dataset", "import", str(path), "--name", "other", "--session-column", "sid"]
    )
    assert renamed.exit_code == 1 and "the session column 'sid'" in renamed.output


def test_the_datasets_page_imports_a_log_and_shows_a_session_as_a_chat(tmp_path: Path) -> None:
    get_workbench().datasets.import_file(
        write(tmp_path, CHATS), "chats", conversation=DEFAULT_CONVERSATION
    )
    at = AppTest.from_file(PAGE, default_timeout=30).run()
    assert not at.exception
    assert at.selectbox(key="dataset_session").value == "s1"
    chat = at.chat_message
    assert [m.name for m in chat] == ["system", "user", "assistant", "user"]
    assert shown(chat[3].markdown[0].value) == "The March one."
    at.selectbox(key="dataset_session").set_value("s2").run()
    assert [m.name for m in at.chat_message] == ["user", "assistant"]
    assert "sk-live-0123456789abcdef0123" not in shown(at.chat_message[0].markdown[0].value)


# ---- replaying a log through a prompt version (`history: logged`) ------------------------

REPLAYED = (
    CHATS
    + """s3,1,user,Hello?
s3,2,user,Anyone there?
s3,3,assistant,Yes! How can I help?
s3,4,user,Never mind.
"""
)


def test_a_replay_sends_each_user_turn_after_the_conversation_so_far(
    tmp_path: Path, db_path: Path
) -> None:
    from promptlab.engine import Engine, parse_spec
    from promptlab.engine.testing import ScriptedProvider
    from promptlab.providers.base import CompletionRequest
    from promptlab.store import Store
    from tests.test_run_dependencies import ENDPOINTS

    sent: dict[str, list[dict[str, str]]] = {}

    def answer(request: CompletionRequest) -> str:
        sent[request.messages[-1]["content"]] = [dict(m) for m in request.messages]
        return "ok"

    provider = ScriptedProvider(answer=answer)
    with Store(db_path) as store:
        from promptlab.data.datasets import DatasetStore

        DatasetStore(store).import_file(
            write(tmp_path, REPLAYED), "chats", author="t", conversation=DEFAULT_CONVERSATION
        )
        with Engine(store, endpoints=ENDPOINTS, provider_factory=lambda _cfg: provider) as eng:
            spec = parse_spec(
                {
                    "name": "replay",
                    "dataset": "chats",
                    "history": "logged",
                    "variants": [
                        {
                            "model": "fake:m1",
                            "messages": [
                                {"role": "system", "content": "Agent for {{ session_id }}."},
                                {"role": "user", "content": "{{ content }}"},
                            ],
                        }
                    ],
                }
            )
            assert eng.estimate(spec).requests == 6  # the user turns, not the 10 messages
            run_id = eng.submit(spec)
            assert eng.wait(run_id, timeout=60).status == "completed"
    system = {"role": "system", "content": "Agent for s1."}
    assert sent["The March one."] == [
        system,
        {"role": "user", "content": "My invoice is wrong."},
        {"role": "assistant", "content": "Sorry to hear that. Which invoice?"},
        {"role": "user", "content": "The March one."},
    ]  # the logged system message gives way to the version's
    assert sent["My invoice is wrong."] == [
        system,
        {"role": "user", "content": "My invoice is wrong."},
    ]
    # A customer who wrote twice: one user turn of both messages, so turns alternate.
    assert sent["Never mind."][1:] == [
        {"role": "user", "content": "Hello?\n\nAnyone there?"},
        {"role": "assistant", "content": "Yes! How can I help?"},
        {"role": "user", "content": "Never mind."},
    ]
    # "Anyone there?" is a turn of its own too: sent joined to the "Hello?" before it.
    assert sent["Hello?\n\nAnyone there?"][1:] == [
        {"role": "user", "content": "Hello?\n\nAnyone there?"}
    ]
    assert len(sent) == 6


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"dataset": "plain", "history": "logged"}, "history: dataset plain is not a conv"),
        ({"dataset": "rows.csv", "history": "logged"}, "is not a conversation log"),
        ({"dataset": "chats", "history": "remembered"}, "logged .* or generated .* got 'rem"),
    ],
)
def test_a_replay_needs_a_conversation_log(
    tmp_path: Path, db_path: Path, spec: dict[str, str], message: str
) -> None:
    with Workbench.open() as wb:
        wb.datasets.import_file(write(tmp_path, CHATS), "plain")
        write(tmp_path, CHATS, "rows.csv")
        data = {
            **spec,
            "variants": [
                {"model": "sim:fast", "messages": [{"role": "user", "content": "{{ content }}"}]}
            ],
        }
        with pytest.raises(Exception, match=message):
            wb.runs.estimate(wb.runs.spec_from_data(data, base_dir=tmp_path))


def test_two_versions_replayed_are_compared_per_session(tmp_path: Path, db_path: Path) -> None:
    """The session is the unit of a replay's comparison: its turns are not independent
    (a log of 3 sessions of 2 user turns is 3 units of 2 requests each, not 6)."""
    log = "session_id,turn,role,content\n" + "".join(
        f"s{s},{t},{role},{role} {s}.{t}\n"
        for s in range(3)
        for t, role in enumerate(("user", "assistant", "user"))
    )
    with Workbench.open() as wb:
        wb.datasets.import_file(write(tmp_path, log), "chats", conversation=DEFAULT_CONVERSATION)
        turn = {"role": "user", "content": "{{ content }}"}
        variants = [
            {
                "name": name,
                "model": "sim:fast",
                "params": {"max_tokens": 20},
                "messages": [{"role": "system", "content": system}, turn],
            }
            for name, system in (("terse", "Be terse."), ("warm", "Be warm and helpful."))
        ]
        run_id = wb.runs.start(
            wb.runs.spec_from_data(
                {
                    "name": "replay two",
                    "dataset": "chats",
                    "history": "logged",
                    "variants": variants,
                }
            )
        )
        assert wb.runs.wait(run_id, timeout=60).status == "completed"
        comparison = wb.analysis.compare(run_id)
        assert comparison.paired and comparison.arms == {"terse": (3, 6), "warm": (3, 6)}
        completion = next(r for r in comparison.rows if r.metric == "completion rate")
        assert (completion.n_control, completion.n_variant) == (3, 3)
        assert completion.analysed_by == "session"  # said so: "per session", "3 sessions"
        per_session = {s.variant: s for s in wb.analysis.sessions(run_id)}
        terse = per_session["terse"]
        assert (terse.sessions, terse.completed, terse.turns_per_session) == (3, 3, 2.0)
        assert terse.latency_p50_ms is not None and terse.latency_p50_ms > 0
    printed = CliRunner().invoke(main, ["metrics", "--run", run_id]).output
    assert "per session" in printed and "sessions 3  completed 3 (100.0%" in printed
    from promptlab.ui.resources import close_all

    close_all()
    at = AppTest.from_file(str(Path(PAGE).parent / "runs.py"), default_timeout=30)
    at.query_params["run"] = run_id
    at.run()
    assert not at.exception
    table = next(d.value for d in at.dataframe if "sessions" in d.value.columns)
    assert list(table["sessions"]) == [3, 3] and list(table["completed"]) == [1.0, 1.0]
    # An item of the replay opens with its whole session: each turn's message and answer.
    wb = get_workbench()
    key = next(
        r.key
        for r in wb.runs.items(run_id, limit=10).rows
        if r.variant == "warm" and r.row_index == 1
    )
    turns = wb.runs.session(run_id, key)
    assert [(t.row_index, t.user, t.status) for t in turns] == [
        (0, "user 0.0", "succeeded"),
        (1, "user 0.2", "succeeded"),
    ]
    assert all(t.output for t in turns)
    at = AppTest.from_file(str(Path(PAGE).parent / "runs.py"), default_timeout=30)
    at.query_params["run"] = run_id
    at.query_params["item"] = key
    at.run()
    assert not at.exception
    whole = next(e for e in at.expander if e.label == "The whole session (2 turns finished)")
    said = [shown(m.markdown[0].value) for m in whole.chat_message]
    assert said[0::2] == ["user 0.0", "user 0.2"] and said[1::2] == [t.output for t in turns]
    assert wb.runs.session(run_id, "f" * 32) == []  # not an item of a replay: no session


def test_a_session_completes_only_when_every_turn_does(tmp_path: Path, db_path: Path) -> None:
    from promptlab.analysis.intervals import session_interval
    from promptlab.data.datasets import DatasetStore
    from promptlab.engine import Engine, parse_spec
    from promptlab.engine.testing import ScriptedProvider
    from promptlab.errors import ErrorKind, ProviderError
    from promptlab.providers.base import CompletionRequest
    from promptlab.store import Store
    from promptlab.store.sessions import SessionReads
    from tests.test_run_dependencies import ENDPOINTS

    def fault(request: CompletionRequest, _calls: int) -> ProviderError | None:
        if request.messages[-1]["content"] == "Never mind.":  # s3's last turn fails
            return ProviderError(ErrorKind.BAD_REQUEST, "refused", status=400)
        return None

    provider = ScriptedProvider(fault=fault)
    with Store(db_path) as store:
        DatasetStore(store).import_file(
            write(tmp_path, REPLAYED), "chats", author="t", conversation=DEFAULT_CONVERSATION
        )
        with Engine(store, endpoints=ENDPOINTS, provider_factory=lambda _cfg: provider) as eng:
            run_id = eng.submit(
                parse_spec(
                    {
                        "name": "replay",
                        "dataset": "chats",
                        "history": "logged",
                        "variants": [
                            {
                                "name": "v",
                                "model": "fake:m1",
                                "messages": [{"role": "user", "content": "{{ content }}"}],
                            }
                        ],
                    }
                )
            )
            eng.wait(run_id, timeout=60)
        (row,) = SessionReads(store).per_variant(run_id)
    assert (row.sessions, row.completed, row.turns_per_session) == (3, 2, 2.0)
    assert row.completion == pytest.approx(2 / 3) and session_interval(row) is not None


def test_a_replay_with_a_user_column_is_compared_per_user(tmp_path: Path, db_path: Path) -> None:
    """A log whose users come back: `unit_column` names its user column, and the two
    versions are compared per user (6 sessions of 3 users are 3 units)."""
    log = "session_id,user_id,turn,role,content\n" + "".join(
        f"s{s},u{s // 2},{t},{role},{role} {s}.{t}\n"
        for s in range(6)
        for t, role in enumerate(("user", "assistant", "user"))
    )
    turn = {"role": "user", "content": "{{ content }}"}
    variants = [
        {
            "name": name,
            "model": "sim:fast",
            "params": {"max_tokens": 20},
            "messages": [{"role": "system", "content": system}, turn],
        }
        for name, system in (("terse", "Be terse."), ("warm", "Be warm and helpful."))
    ]
    spec = {
        "name": "per user",
        "dataset": "chats",
        "history": "logged",
        "unit_column": "user_id",
        "variants": variants,
    }
    with Workbench.open() as wb:
        wb.datasets.import_file(write(tmp_path, log), "chats", conversation=DEFAULT_CONVERSATION)
        with pytest.raises(Exception, match="unit_column: dataset chats has no column 'user'"):
            wb.runs.estimate(wb.runs.spec_from_data({**spec, "unit_column": "user"}))
        with pytest.raises(Exception, match="'unit_column' needs an 'experiment' .or a replay"):
            wb.runs.spec_from_data({k: v for k, v in spec.items() if k != "history"})
        run_id = wb.runs.start(wb.runs.spec_from_data(spec))
        assert wb.runs.wait(run_id, timeout=60).status == "completed"
        comparison = wb.analysis.compare(run_id)
    assert comparison.arms == {"terse": (3, 12), "warm": (3, 12)}
    completion = next(r for r in comparison.rows if r.metric == "completion rate")
    assert (completion.n_control, completion.analysed_by) == (3, "user")
    assert str(completion.reason).startswith("too few users (3; a verdict needs ")
