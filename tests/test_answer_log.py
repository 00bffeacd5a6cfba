"""The answer log: an answer that arrived is kept, across a SIGKILL, and sent only once.

The crash test kills a real `promptlab batch` child at a moment the fake server picks:
with one request in flight at a time, the server holds request K+1 and tells the test,
so answers 1..K have arrived and been taken in (the engine sends the next request only
then) and request K+1 has none. Resumed, no answered request may be sent again.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web
from click.testing import CliRunner

from promptlab.cli import main
from promptlab.engine import Engine, parse_spec
from promptlab.engine.record.answerlog import LOG_SUFFIX, AnswerLog, fold_answer_logs
from promptlab.engine.record.spill import spill_dirs
from promptlab.fakellm.app import REQUEST_ID_HEADER, create_app
from promptlab.fakellm.config import FakeLLMConfig
from promptlab.fakellm.server import RunningServer
from promptlab.records import FinalRow
from promptlab.store import ItemStore, Store
from tests.fakellm_fixtures import endpoint_for, fakellm

__all__ = ["fakellm"]  # a fixture, imported for pytest

ITEMS = 40
#: Answers let through before the server holds a request: half the run.
ANSWERED = ITEMS // 2
#: Seconds to wait for what must happen (the held request, the child's death). Only a
#: broken run takes this long; the test never waits on time otherwise.
PATIENCE_S = 120


class Gate:
    """fakellm middleware: answers `open_for` completions, holds the next one (telling
    `held`) until its client is gone (telling `dropped`); `release` lets all through."""

    def __init__(self, open_for: int) -> None:
        self.open_for = open_for
        self.seen = 0
        self.holding = True
        self.held = threading.Event()
        self.held_id: str | None = None
        self.dropped = threading.Event()

    @web.middleware
    async def middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        if self.holding and request.path.endswith("/chat/completions"):
            self.seen += 1
            if self.seen > self.open_for:
                self.held_id = request.headers.get(REQUEST_ID_HEADER)
                self.held.set()
                try:
                    await asyncio.Event().wait()  # cancelled when the client goes
                finally:
                    self.dropped.set()
        response: web.StreamResponse = await handler(request)
        return response

    def release(self) -> None:
        self.holding = False


@contextlib.contextmanager
def gated_fakellm(gate: Gate) -> Iterator[RunningServer]:
    """A fakellm on a free loopback port with `gate` in front, in a thread. Handlers are
    cancelled when their client disconnects (so a held request ends with its client)."""
    config = FakeLLMConfig(port=0, record_requests=4 * ITEMS)
    app = create_app(config)
    app.middlewares.append(gate.middleware)
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    holder: dict[str, Any] = {}

    async def start() -> None:
        runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        holder["runner"], holder["port"] = runner, runner.addresses[0][1]

    def run() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(start())
        ready.set()
        loop.run_forever()
        loop.run_until_complete(holder["runner"].cleanup())
        loop.close()

    thread = threading.Thread(target=run, name="gated-fakellm", daemon=True)
    thread.start()
    ready.wait(PATIENCE_S)
    try:
        yield RunningServer(f"http://127.0.0.1:{holder['port']}", config)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)


def requests_file(path: Path) -> Path:
    with path.open("w") as handle:
        for i in range(ITEMS):
            messages = [{"role": "user", "content": f"Question {i}?"}]
            body = {"model": "gpt-4o-mini", "max_tokens": 16, "messages": messages}
            line = {"custom_id": f"req-{i}", "method": "POST", "url": "/v1/chat/completions"}
            handle.write(json.dumps({**line, "body": body}) + "\n")
    return path


def kill_at_the_gate(
    tmp_path: Path,
    db_path: Path,
    server: RunningServer,
    gate: Gate,
    env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> str:
    """Start `promptlab batch` in a child (one request at a time), SIGKILL it once the
    server holds request ANSWERED + 1, wait until that request is dropped; its run id."""
    providers = tmp_path / "providers.yaml"
    endpoint = {"kind": "openai", "base_url": server.openai_base_url, "concurrency": 1}
    providers.write_text(yaml.safe_dump({"endpoints": {"fake": endpoint}}))
    monkeypatch.setenv("PROMPTLAB_PROVIDERS", str(providers))  # for the resume, here
    env = {**os.environ, **env}
    requests = requests_file(tmp_path / "requests.jsonl")
    command = [
        sys.executable,
        "-m",
        "promptlab",
        "--db",
        str(db_path),
        "batch",
        str(requests),
        "--endpoint",
        "fake",
        "--quiet",
    ]
    child = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert child.stdout is not None
        run_id = child.stdout.readline().split()[1]
        assert gate.held.wait(PATIENCE_S), "the server never held a request"
        child.send_signal(signal.SIGKILL)
        child.wait(PATIENCE_S)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == -signal.SIGKILL
    assert gate.dropped.wait(PATIENCE_S), "the held request outlived its client"
    gate.release()
    return run_id


def stored_ids(db_path: Path, run_id: str) -> set[str]:
    with Store(db_path) as store, store.read() as cur:
        rows = cur.execute(
            "SELECT rr.row_values FROM results r JOIN run_rows rr ON rr.run_id = r.run_id "
            "AND rr.row_index = r.row_index WHERE r.run_id = ? AND r.status = 'succeeded'",
            [run_id],
        ).fetchall()
    return {json.loads(row)["custom_id"] for (row,) in rows}


def sent_ids(server: RunningServer) -> Counter[str]:
    """How often each item was sent (its idempotency key, as the adapter sends it)."""
    return Counter(r["headers"].get(REQUEST_ID_HEADER) for r in server.requests())


def test_answers_taken_in_before_a_sigkill_are_stored_and_never_sent_again(
    tmp_path: Path, db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = Gate(open_for=ANSWERED)
    with gated_fakellm(gate) as server:
        run_id = kill_at_the_gate(tmp_path, db_path, server, gate, {}, monkeypatch)
        answered = sent_ids(server)
        assert server.stats()["successes"] == len(answered) == ANSWERED
        assert gate.held_id not in answered  # in flight at the kill: one request

        # Any command opening the database folds the killed process's log first.
        listed = CliRunner().invoke(main, ["--db", str(db_path), "status", run_id])
        assert listed.exit_code == 0, listed.output
        kept = stored_ids(db_path, run_id)
        out = tmp_path / "results.jsonl"
        resumed = CliRunner().invoke(
            main, ["--db", str(db_path), "resume", run_id, "-o", str(out), "--quiet"]
        )
        stats = server.stats()
        after = sent_ids(server) - answered
    assert resumed.exit_code == 0, resumed.output
    assert len(kept) == ANSWERED  # every answer that arrived is stored
    assert stats["duplicate_completions"] == 0  # none of them was paid for twice
    assert stats["successes"] == ITEMS
    assert not set(after) & set(answered)  # no answered request was sent again
    assert after[gate.held_id] == 1 and sum(after.values()) == ITEMS - ANSWERED
    assert sorted(json.loads(line)["custom_id"] for line in out.read_text().splitlines()) == sorted(
        f"req-{i}" for i in range(ITEMS)
    )
    assert not list(spill_dirs(db_path)[0].glob(f"*{LOG_SUFFIX}"))  # folded, then deleted


def final_row(key: str, run_id: str = "run_x") -> FinalRow:
    from datetime import UTC, datetime

    return FinalRow(
        key=key,
        run_id=run_id,
        seq=1,
        row_index=0,
        variant="v",
        repeat=0,
        status="succeeded",
        prompt_version_id="pv",
        endpoint="e",
        model="m",
        params={"max_tokens": 5},
        attempts=1,
        finished_at=datetime.now(UTC),
        output_text="an answer",
        check_errors=("a", "b"),
    )


def test_a_live_writers_segment_is_not_folded_and_a_cut_last_line_is_skipped(
    tmp_path: Path, store: Store
) -> None:
    folder = tmp_path / "log"
    live = AnswerLog(folder)
    live.final(final_row("k1"), None)
    segment = next(folder.glob(f"*{LOG_SUFFIX}"))
    # Its writer holds it: folding now (another engine in this process) leaves it alone.
    assert fold_answer_logs(ItemStore(store), folder) == 0
    assert segment.exists()
    live.close(keep=True)
    # Killed half-way through a line: the row it held was never counted as received.
    with segment.open("ab") as handle:
        handle.write(b'{"row":"final","key":"k2","run_')
    from promptlab.engine.record.answerlog import read_answer_log

    batch = read_answer_log(segment)
    assert [f.key for f in batch.finals] == ["k1"]
    assert batch.finals[0].params == {"max_tokens": 5}
    assert batch.finals[0].finished_at.tzinfo is not None
    # Its writer gone (the lock with it), the next opener folds it and deletes it.
    assert fold_answer_logs(ItemStore(store), folder) == 1
    assert not segment.exists()


def test_segments_are_deleted_once_their_batch_is_stored_and_redacted_on_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SOME_API_KEY", "sk-secret-value-123456")
    folder = tmp_path / "log"
    log = AnswerLog(folder)
    row = final_row("k1")
    leaky = FinalRow(**{**row.__dict__, "output_text": "the key is sk-secret-value-123456"})
    log.final(leaky, None)
    (segment,) = folder.glob(f"*{LOG_SUFFIX}")
    assert b"sk-secret-value-123456" not in segment.read_bytes()
    sealed = log.seal()
    log.final(row, None)  # a new segment for the next batch
    assert len(list(folder.glob(f"*{LOG_SUFFIX}"))) == 2
    log.drop(sealed)
    assert not segment.exists() and len(list(folder.glob(f"*{LOG_SUFFIX}"))) == 1
    log.close(keep=False)
    assert not list(folder.glob(f"*{LOG_SUFFIX}"))


def test_a_run_whose_log_cannot_be_written_still_stores_every_answer(
    tmp_path: Path,
    db_path: Path,
    fakellm: RunningServer,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv("FAKELLM_KEY", "sk-test-fakellm")
    # A file where the log's folder should be: the log is off, the store still writes.
    spill_dirs(db_path)[0].write_text("not a folder")
    dataset = tmp_path / "rows.csv"
    dataset.write_text("text\n" + "".join(f"row {i}\n" for i in range(30)))
    spec = parse_spec(
        {
            "name": "no-log",
            "dataset": str(dataset),
            "variants": [
                {
                    "name": "v",
                    "model": "fake-openai:gpt-4o-mini",
                    "messages": [{"role": "user", "content": "{{ text }}"}],
                }
            ],
        }
    )
    endpoints = {"fake-openai": endpoint_for(fakellm, "openai")}
    with Store(db_path) as store, Engine(store, endpoints=endpoints) as engine:
        run_id = engine.submit(spec)
        progress = engine.wait(run_id, timeout=PATIENCE_S)
    assert progress.status == "completed" and progress.succeeded == 30
    assert "answer log off until the next batch" in caplog.text
