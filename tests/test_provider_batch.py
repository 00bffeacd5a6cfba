"""`executor: provider-batch`: a run's requests through the providers' Batch APIs (fakellm
emulates both, tested against the real SDKs), with the same run model as live calls."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from streamlit.testing.v1 import AppTest

from promptlab.cli import main
from promptlab.clock import SYSTEM_CLOCK, Clock
from promptlab.config import Settings
from promptlab.engine.testing import ManualClock
from promptlab.errors import ErrorKind, ProviderError
from promptlab.fakellm.server import FakeLLMConfig, RunningServer, serve_in_thread
from promptlab.providers.base import CompletionRequest, CompletionResponse, FinishReason
from promptlab.providers.batchconfig import BatchSettings
from promptlab.providers.batches.clients import Line, Outcome, RemoteBatch
from promptlab.providers.batches.provider import BatchProvider
from promptlab.providers.config import EndpointConfig
from promptlab.records import RunStatus
from promptlab.store import Store
from promptlab.store.provider_batches import BatchLedgerStore
from promptlab.workbench import Workbench

ROOT = Path(__file__).resolve().parent.parent
#: Seconds a test waits for what it expects before it fails (never a sleep).
PATIENCE_S = 60.0
LINES = 100
#: One batch holds at most this many lines here: 100 lines make three batches.
PER_BATCH = 40
PRICE = {"input_per_mtok": 1.0, "output_per_mtok": 2.0, "context_window": 8192}

Fake = Callable[..., RunningServer]


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Fake]:
    """fakellm with the given switches, and a providers file whose endpoint `fake` (of
    `kind`) sends its batches there, polled every 20 ms."""
    servers: list[Any] = []

    def start(kind: str = "openai", clock: Clock = SYSTEM_CLOCK, **config: Any) -> RunningServer:
        context = serve_in_thread(FakeLLMConfig(port=0, **config), clock)
        server = context.__enter__()
        servers.append(context)
        base = server.openai_base_url if kind == "openai" else server.anthropic_base_url
        endpoint = {
            "kind": kind,
            "base_url": base,
            "models": {"*": PRICE},
            "batch": {"max_requests": PER_BATCH, "poll_s": 0.02, "linger_s": 0.05},
        }
        providers = tmp_path / "providers.yaml"
        providers.write_text(yaml.safe_dump({"endpoints": {"fake": endpoint}}))
        monkeypatch.setenv("PROMPTLAB_PROVIDERS", str(providers))
        return server

    yield start
    for context in reversed(servers):
        context.__exit__(None, None, None)


def request_file(path: Path, lines: int = LINES) -> Path:
    with path.open("w") as handle:
        for i in range(lines):
            body = {
                "model": "m",
                "messages": [{"role": "user", "content": f"q {i}"}],
                "max_tokens": 20,
                "temperature": 0,
            }
            line = {
                "custom_id": f"r{i}",
                "method": "POST",
                "url": "/v1/chat/completions",
                "body": body,
            }
            handle.write(json.dumps(line) + "\n")
    return path


def batch_command(requests: Path, out: Path) -> list[str]:
    return ["batch", str(requests), "--endpoint", "fake", "--provider-batch", "-o", str(out)]


def outputs(path: Path) -> dict[str, dict[str, Any]]:
    return {row["custom_id"]: row for row in map(json.loads, path.read_text().splitlines())}


def batches_at(server: RunningServer) -> list[dict[str, Any]]:
    """fakellm's own view of its batches (GET /_batches)."""
    with urllib.request.urlopen(f"{server.base_url}/_batches") as answer:  # noqa: S310
        data = json.loads(answer.read())
    return list(data["batches"] if isinstance(data, dict) else data)


def rows(db: Path, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    with Store(db) as store, store.read() as cur:
        return list(cur.execute(sql, list(params)).fetchall())


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_a_batch_run_goes_through_the_batch_api_at_half_price_and_names_its_batches(
    tmp_path: Path, db_path: Path, fake: Fake, kind: str
) -> None:
    server = fake(kind)
    out = tmp_path / "out.jsonl"
    result = CliRunner().invoke(main, batch_command(request_file(tmp_path / "in.jsonl"), out))
    assert result.exit_code == 0, result.output
    answers = outputs(out)
    assert sorted(answers) == sorted(f"r{i}" for i in range(LINES))
    assert all(a["response"]["status_code"] == 200 for a in answers.values())
    stats = server.stats()
    # Three batches of at most 40 lines, every line once, nothing sent live.
    assert (stats["batches_created"], stats["batch_lines_received"]) == (3, LINES)
    assert stats["attempts"] == 0
    [(run_id,)] = rows(db_path, "SELECT run_id FROM runs")
    [(tokens_in, tokens_out, cost, attempts)] = rows(
        db_path,
        "SELECT sum(input_tokens), sum(output_tokens), sum(cost_usd), max(attempts) "
        "FROM results WHERE run_id = ?",
        run_id,
    )
    live = (tokens_in * 1.0 + tokens_out * 2.0) / 1e6
    assert cost == pytest.approx(live / 2)
    assert attempts == 1
    batches = rows(db_path, "SELECT batch_id, state, line_count, collected FROM provider_batches")
    assert sorted(b[2] for b in batches) == [20, 40, 40]
    assert all(b[1] == "completed" and b[3] for b in batches)
    # Each item's trace names its batch and line.
    payloads = [
        json.loads(p)
        for (p,) in rows(
            db_path, "SELECT payload FROM audit_events WHERE kind = 'result' AND run_id = ?", run_id
        )
    ]
    assert {p["batch_id"] for p in payloads} == {b[0] for b in batches}
    assert all(p["batch_line"].endswith("-a1") for p in payloads)
    status = CliRunner().invoke(main, ["status", run_id])
    assert "provider batches (3):" in status.output
    assert "3 batches: 3 completed" in status.output
    # The Runs page shows them too.
    page = AppTest.from_file(str(ROOT / "pages" / "runs.py"), default_timeout=30)
    page.query_params["run"] = run_id
    page.run()
    assert not page.exception
    [table] = [t for t in page.dataframe if "answered" in t.value.columns]
    assert sorted(table.value["lines"]) == [20, 40, 40]
    assert set(table.value["state"]) == {"completed"}


def wait_for(what: Callable[[], bool], child: subprocess.Popen[str] | None = None) -> None:
    deadline = time.monotonic() + PATIENCE_S
    while not what():
        assert child is None or child.poll() is None, "the run ended before it was killed"
        assert time.monotonic() < deadline
        time.sleep(0.02)


def test_a_killed_owner_resumes_polling_its_batches_and_sends_no_line_twice(
    tmp_path: Path, db_path: Path, fake: Fake
) -> None:
    clock = ManualClock()
    server = fake("openai", clock, batch_delay_s=600)
    requests, out = request_file(tmp_path / "in.jsonl"), tmp_path / "out.jsonl"
    command = [
        sys.executable,
        "-m",
        "promptlab",
        "--db",
        str(db_path),
        *batch_command(requests, out),
        "--quiet",
    ]
    child = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=os.environ.copy())
    try:
        assert child.stdout is not None
        run_id = child.stdout.readline().split()[1]
        wait_for(lambda: server.stats()["batches_created"] == 3, child)
        child.send_signal(signal.SIGKILL)
        child.wait(10)
    finally:
        if child.poll() is None:
            child.kill()
    clock.advance(700)  # the batches finish while no process follows them
    resumed = CliRunner().invoke(main, ["resume", run_id, "-o", str(out), "--quiet"])
    assert resumed.exit_code == 0, resumed.output
    answers = outputs(out)
    assert len(answers) == LINES
    assert all(a["response"]["status_code"] == 200 for a in answers.values())
    stats = server.stats()
    assert (stats["batches_created"], stats["batch_lines_received"]) == (3, LINES)
    assert stats["batch_repeated_ids"] == []
    # One attempt per item: the resume waited for the lines it had sent.
    assert rows(
        db_path,
        "SELECT count(*), count(DISTINCT idempotency_key) FROM attempts WHERE run_id = ?",
        run_id,
    ) == [(LINES, LINES)]


def started(wb: Workbench, requests: Path) -> str:
    return wb.runs.start(
        wb.runs.batch_spec(requests, "fake", None, "custom_id", {"executor": "provider-batch"})
    )


def test_cancel_cancels_the_provider_batches_and_a_resume_sends_only_what_they_did_not_answer(
    tmp_path: Path, db_path: Path, fake: Fake
) -> None:
    clock = ManualClock()
    server = fake("openai", clock, batch_delay_s=1000)
    with Workbench.open(Settings.from_env()) as wb:
        run_id = started(wb, request_file(tmp_path / "in.jsonl"))
        wait_for(lambda: len([b for b in wb.runs.view(run_id).batches if b.batch_id]) == 3)
        clock.advance(500)  # about half of each batch's lines answered
        wb.runs.cancel(run_id)
        assert wb.runs.wait(run_id, timeout=PATIENCE_S).status == RunStatus.CANCELLED
        # The batches are cancelled at the provider in the background: the clock moves on
        # once every cancel has arrived (one that came after it would wait for a finalizing
        # time the manual clock never gives it).
        wait_for(lambda: {b["status"] for b in batches_at(server)} == {"cancelling"})
        clock.advance(200)  # a cancelling batch takes its finalizing time to be cancelled
        wait_for(lambda: {b["status"] for b in batches_at(server)} == {"cancelled"})
        answered = server.stats()["batch_lines_answered"]
        assert 0 < answered < LINES
        wb.runs.resume(run_id)
        # Retried lines come back after their backoff, in one new batch or more: each
        # read of the clock below finishes the batches made so far.
        wait_for(lambda: clock.advance(2000) or wb.runs.view(run_id).status == "completed")
        assert wb.runs.view(run_id).counts.succeeded == LINES
    stats = server.stats()
    # The lines the cancelled batches answered were taken from them, not sent again.
    assert stats["batch_lines_received"] == LINES + (LINES - answered)


def attempt_rows(db: Path, run_id: str) -> list[tuple[str, int, str | None, str | None]]:
    return [
        (str(r[0]), int(r[1]), r[2], r[3])
        for r in rows(
            db,
            "SELECT idempotency_key, attempt, error_kind, error_message FROM attempts "
            "WHERE run_id = ? ORDER BY idempotency_key, attempt",
            run_id,
        )
    ]


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_an_expired_batch_answers_what_it_did_and_its_other_lines_go_in_a_new_batch(
    tmp_path: Path, db_path: Path, fake: Fake, kind: str
) -> None:
    clock = ManualClock()
    # The first three batches expire half-way; the batch their other lines go in does not.
    server = fake(kind, clock, batch_delay_s=1000, batch_expire_s=500, batch_expire_first=3)
    with Workbench.open(Settings.from_env()) as wb:
        run_id = started(wb, request_file(tmp_path / "in.jsonl"))
        wait_for(lambda: len([b for b in wb.runs.view(run_id).batches if b.batch_id]) == 3)
        clock.advance(600)  # past the expiry: about half of each batch answered
        wait_for(lambda: clock.advance(1000) or wb.runs.view(run_id).status == "completed")
        assert wb.runs.view(run_id).counts.succeeded == LINES
        states = [b.state for b in wb.runs.view(run_id).batches]
    assert states[:3] == ["expired"] * 3 and set(states[3:]) == {"completed"}
    attempts = attempt_rows(db_path, run_id)
    expired = [a for a in attempts if a[1] == 1 and a[2] == "timeout"]
    assert 0 < len(expired) < LINES
    assert all("expired before line" in str(a[3]) for a in expired)
    # Each expired line was sent once more, and nothing else was.
    assert server.stats()["batch_lines_received"] == LINES + len(expired)
    assert len(attempts) == LINES + len(expired)


def test_lines_that_fail_inside_a_batch_are_retried_by_the_runs_policy(
    tmp_path: Path, db_path: Path, fake: Fake
) -> None:
    server = fake("openai", batch_line_fail_rate=0.2)
    out = tmp_path / "out.jsonl"
    result = CliRunner().invoke(main, batch_command(request_file(tmp_path / "in.jsonl"), out))
    assert result.exit_code == 0, result.output
    [(run_id,)] = rows(db_path, "SELECT run_id FROM runs")
    attempts = attempt_rows(db_path, run_id)
    failed_first = {a[0] for a in attempts if a[1] == 1 and a[2] == "server"}
    assert failed_first, "fakellm failed no line"
    retried = {a[0] for a in attempts if a[1] == 2}
    assert failed_first <= retried
    assert sum(a["response"]["status_code"] == 200 for a in outputs(out).values()) == LINES
    assert server.stats()["batch_lines_received"] == len(attempts)


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_an_unreadable_result_line_fails_its_own_item_and_every_other_answer_is_kept(
    tmp_path: Path, db_path: Path, fake: Fake, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The first batch's first four result lines cannot be read (cut short, a JSON
    array, `error` a bare string, an answer whose choices or content are not a list):
    each fails its own item with an error naming the batch and line (the array names no
    item: it is logged, and its item is missing from the results), the run's policy
    sends those items again in a new batch, and every other answer is kept as it came."""
    server = fake(kind, batch_bad_lines=4)
    out = tmp_path / "out.jsonl"
    result = CliRunner().invoke(main, batch_command(request_file(tmp_path / "in.jsonl"), out))
    assert result.exit_code == 0, result.output
    [(run_id, status)] = rows(db_path, "SELECT run_id, status FROM runs")
    assert status == "completed"
    attempts = attempt_rows(db_path, run_id)
    failed = sorted((a for a in attempts if a[1] == 1 and a[2] is not None), key=str)
    unreadable = [a for a in failed if "could not be read" in str(a[3])]
    assert len(failed) == 4 and len(unreadable) == 2, failed  # cut short; choices/content
    assert all(a[2] == "server" and " of its " in str(a[3]) for a in unreadable), failed
    # The bare string is the line's own error; the array's item was never answered.
    assert [a[2] for a in failed if "boom" in str(a[3])] == ["server"], failed
    assert [a[2] for a in failed if "was answered" in str(a[3])] == ["timeout"], failed
    assert "names no line" in caplog.text
    # Only the four were sent again; the other 96 answers of the first batches stand.
    assert server.stats()["batch_lines_received"] == LINES + 4 == len(attempts)
    assert sum(a["response"]["status_code"] == 200 for a in outputs(out).values()) == LINES


def test_a_live_answer_without_its_message_is_a_failed_attempt_not_an_empty_output(
    tmp_path: Path,
) -> None:
    """`choices` not a list, or a choice without its message (OpenAI), or `content` not
    a list (Anthropic), through each adapter: a `server` error naming what is missing."""
    from promptlab.providers import build_provider
    from promptlab.providers.config import EndpointConfig

    bodies = {
        "openai": [
            {"id": "x", "model": "m", "choices": "nope"},
            {"id": "x", "model": "m", "choices": [{"index": 0}]},
        ],
        "anthropic": [
            {
                "id": "x",
                "type": "message",
                "role": "assistant",
                "model": "m",
                "content": "nope",
                "usage": {"input_tokens": 1, "output_tokens": 1},
            }
        ],
    }
    for kind, answers in bodies.items():
        for transport in ("sdk", "http"):
            for body in answers:
                server = AnswerServer(body)
                try:
                    base = server.url + ("/v1" if kind == "openai" else "")
                    cfg = EndpointConfig(name="w", kind=kind, base_url=base, transport=transport)
                    error = asyncio.run(fails(build_provider(cfg), kind))
                finally:
                    server.shutdown()
                    server.server_close()
                assert error.kind is ErrorKind.SERVER, (kind, transport, body, error)
                assert "malformed response body" in str(error), (kind, transport, error)


async def fails(provider: Any, kind: str) -> ProviderError:
    request = CompletionRequest(
        model="m",
        messages=({"role": "user", "content": "hi"},),
        max_tokens=8,
        request_id="r",
        timeout_s=10,
    )
    try:
        answer = await provider.complete(request)
    except ProviderError as exc:
        return exc
    finally:
        await provider.aclose()
    raise AssertionError(f"{kind}: an answer without its message was taken: {answer!r}")


class AnswerServer(ThreadingHTTPServer):
    """A loopback server answering every POST 200 with one JSON body."""

    daemon_threads = True

    def __init__(self, body: Any) -> None:
        super().__init__(("127.0.0.1", 0), _Answer)
        self.body = json.dumps(body).encode()
        self.url = f"http://127.0.0.1:{self.server_address[1]}"
        threading.Thread(
            target=self.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()


class _Answer(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = self.server.body  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def test_a_batch_the_provider_refuses_fails_its_lines_with_the_reason_and_loses_nothing(
    tmp_path: Path, db_path: Path, fake: Fake
) -> None:
    fake("openai", batch_max_requests=10)  # each 40-line batch is refused as a whole
    out = tmp_path / "out.jsonl"
    result = CliRunner().invoke(main, batch_command(request_file(tmp_path / "in.jsonl"), out))
    assert result.exit_code != 0
    [(run_id, status, reason)] = rows(db_path, "SELECT run_id, status, status_reason FROM runs")
    assert status == "failed"
    assert "was refused by fake" in reason
    messages = {
        m
        for (m,) in rows(
            db_path,
            "SELECT error_message FROM results WHERE run_id = ? AND status = 'failed'",
            run_id,
        )
    }
    assert messages and all("was refused by fake" in m for m in messages)
    # Nothing answered was lost: every item has its final row, and a resume can finish it.
    assert rows(db_path, "SELECT count(*) FROM results WHERE run_id = ?", run_id) == [(LINES,)]


class RepeatingClient:
    """A Batch API whose results name a line it was never sent, repeat another and
    leave one out: what a provider's bug (or a mixed-up file) would hand back."""

    def __init__(self) -> None:
        self.sent: list[str] = []

    async def submit(self, chunk_id: str, lines: Sequence[Line]) -> RemoteBatch:
        self.sent = [line.custom_id for line in lines]
        return RemoteBatch("batch_x", "completed", total=len(lines), succeeded=len(lines))

    async def retrieve(self, batch_id: str) -> RemoteBatch:
        return RemoteBatch(batch_id, "completed", total=len(self.sent), succeeded=len(self.sent))

    async def results(self, batch: RemoteBatch) -> AsyncIterator[tuple[str, Outcome]]:
        first, second, _left_out = self.sent
        for custom_id, text in (
            (first, "one"),
            ("stranger-a1", "?"),
            (second, "two"),
            (second, "again"),
        ):
            yield custom_id, CompletionResponse(text, 1, 1, FinishReason.STOP, "m", 0.0)

    async def cancel(self, batch_id: str) -> None:
        raise AssertionError("nothing is cancelled here")

    async def find(self, chunk_id: str, lines: int, since: float) -> str | None:
        return None

    async def aclose(self) -> None:
        pass


def test_results_with_unknown_or_repeated_ids_are_said_once_and_lose_no_line(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    endpoint = EndpointConfig(
        "fake", "openai", executor="provider-batch", batch=BatchSettings(poll_s=0, linger_s=0)
    )
    provider = BatchProvider(endpoint, RepeatingClient(), BatchLedgerStore(store))

    async def three() -> list[CompletionResponse | BaseException]:
        requests = [
            CompletionRequest(
                "m", ({"role": "user", "content": str(i)},), item_key=f"k{i}", run_id="run_x"
            )
            for i in range(3)
        ]
        return await asyncio.gather(*map(provider.complete, requests), return_exceptions=True)

    first, second, third = asyncio.run(three())
    assert isinstance(first, CompletionResponse) and first.text == "one"
    assert isinstance(second, CompletionResponse) and second.text == "two"  # the first kept
    assert (first.batch_id, first.batch_line) == ("batch_x", "k0-a1")
    # The line the results left out is an error the run's retry policy sends again.
    assert isinstance(third, ProviderError) and third.kind is ErrorKind.TIMEOUT
    said = [r.getMessage() for r in caplog.records if "batch_x" in r.getMessage()]
    assert said == [
        "fake: batch batch_x's results name 1 line(s) it was not sent (stranger-a1) and "
        "repeat 1 (k1-a1); those were left out, the first answer of each line kept"
    ]
    with store.read() as cur:
        assert cur.execute("SELECT batch_id, state FROM provider_batches").fetchall() == [
            ("batch_x", "completed")
        ]


def spec_file(tmp_path: Path, endpoint: dict[str, Any], *models: str) -> Path:
    (tmp_path / "rows.csv").write_text("q\n" + "".join(f"question {i}\n" for i in range(12)))
    variants = [
        {"name": f"v{i}", "model": model, "messages": [{"role": "user", "content": "{{ q }}"}]}
        for i, model in enumerate(models)
    ]
    spec = {
        "name": "spec through batches",
        "dataset": "rows.csv",
        "endpoints": {"mine": endpoint},
        "variants": variants,
    }
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def test_a_run_spec_with_its_own_loopback_endpoint_runs_through_its_batch_api(
    tmp_path: Path, db_path: Path
) -> None:
    with serve_in_thread(FakeLLMConfig(port=0)) as server:
        endpoint = {
            "kind": "anthropic",
            "base_url": server.anthropic_base_url,
            "batch": {"max_requests": 5, "poll_s": 0.02, "linger_s": 0.05},
        }
        spec = spec_file(tmp_path, endpoint, "mine:claude-sonnet-4-5")
        result = CliRunner().invoke(main, ["run", str(spec), "--provider-batch"])
        stats = server.stats()
    assert result.exit_code == 0, result.output
    assert "items 12: succeeded 12" in result.output
    sent = stats["batches_created"], stats["batch_lines_received"], stats["attempts"]
    assert sent == (3, 12, 0)


def test_each_batch_holds_one_model_as_openai_requires(tmp_path: Path, db_path: Path) -> None:
    with serve_in_thread(FakeLLMConfig(port=0)) as server:
        endpoint = {
            "kind": "openai",
            "base_url": server.openai_base_url,
            "batch": {"poll_s": 0.02, "linger_s": 0.05},
        }
        spec = spec_file(tmp_path, endpoint, "mine:gpt-4o-mini", "mine:gpt-4o")
        result = CliRunner().invoke(main, ["run", str(spec), "--provider-batch"])
        stats = server.stats()
    # fakellm, as OpenAI, fails a batch file naming two models: both variants answered.
    assert result.exit_code == 0, result.output
    assert "items 24: succeeded 24" in result.output
    assert (stats["batches_created"], stats["batch_lines_received"]) == (2, 24)


@pytest.mark.parametrize(
    ("endpoint", "said"),
    [
        (
            {"kind": "openai", "base_url": "http://127.0.0.1:9/v1", "batch": {"poll_s": -1}},
            "batch: poll_s must be a number >= 0",
        ),
        (
            {"kind": "openai", "base_url": "http://127.0.0.1:9/v1", "batch": {"every": 1}},
            "batch: unknown field(s) every",
        ),
    ],
)
def test_a_bad_batch_setting_is_refused_naming_its_field(
    tmp_path: Path, endpoint: dict[str, Any], said: str
) -> None:
    result = CliRunner().invoke(main, ["run", str(spec_file(tmp_path, endpoint, "mine:m"))])
    assert result.exit_code != 0
    assert f"endpoints.mine: {said}" in result.output


def test_an_endpoint_without_a_batch_api_is_refused_before_anything_is_sent(
    tmp_path: Path, db_path: Path
) -> None:
    spec = spec_file(tmp_path, {"kind": "sim"}, "sim:careful")
    result = CliRunner().invoke(main, ["run", str(spec), "--provider-batch"])
    assert result.exit_code == 2
    assert "endpoint 'sim' (sim) has no Batch API" in result.output
    result = CliRunner().invoke(main, ["run", str(spec), "--provider-batch", "--distributed"])
    assert "--distributed and --provider-batch: choose one" in result.output


def test_the_estimate_prices_a_provider_batch_run_at_the_batch_price(
    tmp_path: Path, db_path: Path, fake: Fake
) -> None:
    fake("openai")
    requests = request_file(tmp_path / "in.jsonl")
    with Workbench.open(Settings.from_env()) as wb:
        costs = [
            wb.runs.estimate(
                wb.runs.batch_spec(requests, "fake", None, "custom_id", settings)
            ).cost_usd
            for settings in ({}, {"executor": "provider-batch"})
        ]
    live, batched = costs
    assert live is not None and batched is not None and live > 0
    assert batched == pytest.approx(live / 2)


DEMO = ROOT / "data" / "demo"


def test_the_demo_spec_runs_through_a_batch_survives_a_killed_owner_and_completes(
    tmp_path: Path, db_path: Path
) -> None:
    clock = ManualClock()
    config = FakeLLMConfig(port=0, batch_delay_s=600)
    with serve_in_thread(config, clock) as server:
        spec = yaml.safe_load((DEMO / "runs" / "triage-provider-batch.yaml").read_text())
        spec["dataset"] = str(DEMO / "tickets.csv")
        spec["endpoints"]["fakellm"]["base_url"] = server.openai_base_url
        spec["endpoints"]["fakellm"]["batch"]["poll_s"] = 0.02
        (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
        added = CliRunner().invoke(main, ["prompt", "add", str(DEMO / "ticket-triage.yaml")])
        assert added.exit_code == 0, added.output
        command = [
            sys.executable,
            "-m",
            "promptlab",
            "--db",
            str(db_path),
            "run",
            str(tmp_path / "spec.yaml"),
            "--quiet",
        ]
        child = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=os.environ.copy())
        try:
            assert child.stdout is not None
            run_id = child.stdout.readline().split()[1]
            wait_for(lambda: server.stats()["batches_created"] == 1, child)
            child.send_signal(signal.SIGKILL)
            child.wait(10)
        finally:
            if child.poll() is None:
                child.kill()
        clock.advance(700)
        resumed = CliRunner().invoke(main, ["resume", run_id])
        stats = server.stats()
    assert resumed.exit_code == 0, resumed.output
    [(total,)] = rows(db_path, "SELECT total_items FROM runs WHERE run_id = ?", run_id)
    assert f"items {total}: succeeded {total}" in resumed.output
    assert (stats["batches_created"], stats["batch_lines_received"]) == (1, total)
