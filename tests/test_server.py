"""`promptlab serve`: one process owns the database and the engine; the CLI and any HTTP
client use its API (issue 24). The server runs as a real child process on a free
loopback port; the CLI finds it by the discovery file beside the database."""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from promptlab.cli import main
from promptlab.experiments import assign
from promptlab.fakellm.server import RunningServer
from promptlab.server.client import ServerClient
from promptlab.server.discovery import ServerInfo, discovery_path, find_server
from promptlab.store import Store
from tests.conftest import isolate
from tests.fakellm_fixtures import ServerFactory

ROWS = 60


class Served:
    """A `promptlab serve` child process and how to call it."""

    def __init__(self, db: Path, *options: str) -> None:
        self.db = db
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "promptlab", "--db", str(db), "serve", "--port", "0", *options],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,  # unread, a pipe could fill and block the server
        )
        # Generous: the interpreter's imports alone take 4 to 5 s at load 5, several
        # times that on a busier machine.
        deadline = time.monotonic() + 120
        info = None
        while info is None:
            assert self.proc.poll() is None, "the server exited"
            assert time.monotonic() < deadline, "the server did not start"
            info = find_server(db)
            time.sleep(0.05)
        self.info: ServerInfo = info

    def call(
        self, method: str, path: str, body: Any = None, token: str | None = "", key: str = ""
    ) -> Any:
        """(status, JSON or text) of one request; `token` None sends none; `key` is an
        Idempotency-Key."""
        headers = {"Content-Type": "application/json"}
        if key:
            headers["Idempotency-Key"] = key
        if token is not None:
            headers["Authorization"] = f"Bearer {token or self.info.token}"
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            self.info.url + path, data=data, method=method, headers=headers
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as resp:  # noqa: S310 - loopback
                raw = resp.read()
                status = resp.status
        except urllib.error.HTTPError as exc:
            raw, status = exc.read(), exc.code
        try:
            return status, json.loads(raw)
        except ValueError:
            return status, raw.decode()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(30)


def succeeded(db: Path, run_id: str) -> tuple[int, int]:
    """(succeeded rows, distinct items among them) of a run."""
    with Store(db) as store, store.read() as cur:
        row = cur.execute(
            "SELECT count(*), count(DISTINCT idempotency_key) FROM results "
            "WHERE run_id = ? AND status = 'succeeded'",
            [run_id],
        ).fetchone()
    return (int(row[0]), int(row[1])) if row else (0, 0)


@pytest.fixture
def served(db_path: Path) -> Iterator[Served]:
    server = Served(db_path)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def served_once(tmp_path_factory: pytest.TempPathFactory, cache_home: Path) -> Iterator[Served]:
    """One server for this module's tests that change nothing (each refusal, the token):
    a server start is about a second of CPU. Started in a test's isolated environment."""
    db = tmp_path_factory.mktemp("served-once") / "promptlab.duckdb"
    with pytest.MonkeyPatch.context() as monkeypatch:
        isolate(monkeypatch, db)
        monkeypatch.setenv("XDG_CACHE_HOME", str(cache_home))
        server = Served(db)
    try:
        yield server
    finally:
        server.stop()


def _spec(tmp_path: Path, server: RunningServer, name: str = "served") -> Path:
    dataset = tmp_path / "rows.csv"
    dataset.write_text("text\n" + "".join(f"row {i}\n" for i in range(ROWS)))
    spec = {
        "name": name,
        "dataset": "rows.csv",  # relative to the spec: the server reads it from there
        "variants": [
            {
                "name": "v",
                "messages": [{"role": "user", "content": "Summarize {{ text }}"}],
                "model": "fake:gpt-4o-mini",
                "params": {"max_tokens": 16},
            }
        ],
        "endpoints": {
            "fake": {"kind": "openai", "base_url": server.openai_base_url, "concurrency": 3}
        },
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def _prompt_file(tmp_path: Path) -> Path:
    path = tmp_path / "served-prompt.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "name": "served-prompt",
                "versions": [{"messages": [{"role": "user", "content": "Hi {{ name }}"}]}],
            }
        )
    )
    return path


def test_the_api_wants_the_token_and_describes_itself(served_once: Served) -> None:
    served = served_once
    assert served.call("GET", "/v1/runs", token=None) == (
        401,
        {"error": "missing or wrong token (Authorization: Bearer TOKEN)"},
    )
    assert served.call("GET", "/metrics", token="wrong")[0] == 401
    status, health = served.call("GET", "/v1/health")
    assert status == 200 and health["database"] == str(served.db)
    status, openapi = served.call("GET", "/openapi.json", token=None)
    assert status == 200 and "/v1/assign" in openapi["paths"]
    # The discovery file holds the token: its owner alone may read it.
    assert discovery_path(served.db).stat().st_mode & 0o777 == 0o600


def test_the_cli_runs_through_the_server_and_others_see_the_run(
    served: Served, tmp_path: Path, fakellm_factory: ServerFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = fakellm_factory(latency_ms=5)
    monkeypatch.setenv("PROMPTLAB_AUTHOR", "José Ñúñez")  # not Latin-1 safe in a header
    result = CliRunner().invoke(main, ["run", str(_spec(tmp_path, server)), "--quiet"])
    assert result.exit_code == 0, result.output + result.stderr
    run_id = result.stdout.split()[1]
    assert "completed" in result.stdout
    # stdout as without a server; one line on stderr says which server answered.
    assert result.stderr.startswith(f"through the promptlab server at {served.info.url} (pid ")
    # The owner's token is the server's service ("tester"): it acts for this shell's author.
    status, submitted = served.call("GET", f"/v1/audit/events?kind=run.submitted&run_id={run_id}")
    assert [e["actor"] for e in submitted] == ["tester on behalf of José Ñúñez"]
    status, runs = served.call("GET", "/v1/runs")
    assert status == 200 and [r["run_id"] for r in runs] == [run_id]
    listed = CliRunner().invoke(main, ["status"])
    assert run_id in listed.output and "completed  60/60" in listed.output
    # Every other command runs inside the server, on its database: reads and writes.
    verified = CliRunner().invoke(main, ["audit", "verify"])
    assert verified.exit_code == 0, verified.output + verified.stderr
    metrics = CliRunner().invoke(main, ["metrics", "--run", run_id])
    assert metrics.exit_code == 0, metrics.output + metrics.stderr
    assert "fake:gpt-4o-mini" in metrics.output
    # There is no command-line route: a server runs typed routes only (issue 37).
    status, refused = served.call("POST", "/v1/cli", {"argv": ["--db", "x", "serve"]})
    assert status == 404, refused
    # A relative path is this shell's, wherever the server runs; what the command
    # changes is this shell's author's, not the server's.
    _prompt_file(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PROMPTLAB_AUTHOR", "dana")
    added = CliRunner().invoke(main, ["prompt", "add", "served-prompt.yaml"])
    assert added.exit_code == 0, added.output + added.stderr
    history = CliRunner().invoke(main, ["prompt", "history", "served-prompt"])
    assert "  tester on behalf of dana" in history.output, history.output
    exported = CliRunner().invoke(main, ["prompt", "export", "served-prompt", "-o", "out.yaml"])
    assert exported.exit_code == 0, exported.output + exported.stderr
    assert "served-prompt" in (tmp_path / "out.yaml").read_text()
    bad = CliRunner().invoke(main, ["prompt", "show", "no-such-prompt"])
    assert bad.exit_code != 0 and "no-such-prompt" in bad.stderr
    # /metrics counts the run's transitions and its attempts per endpoint: the spec's
    # own endpoint `fake` under the one value of every spec-declared endpoint.
    status, text = served.call("GET", "/metrics")
    assert status == 200
    assert 'promptlab_run_transitions_total{state="completed"} 1.0' in text
    assert 'promptlab_attempts_total{endpoint="spec-declared",kind="ok"} 60.0' in text
    assert 'promptlab_request_latency_seconds_count{endpoint="spec-declared"} 60.0' in text
    assert "promptlab_store_spills_total 0.0" in text
    commits = next(
        float(line.split()[-1])
        for line in text.splitlines()
        if line.startswith("promptlab_store_write_seconds_count")
    )
    assert commits >= 1


def test_two_cli_runs_at_once_share_the_server_s_one_budget(
    served: Served, tmp_path: Path, fakellm_factory: ServerFactory
) -> None:
    server = fakellm_factory(latency_ms=20)
    specs = [_spec(tmp_path, server, name) for name in ("first", "second")]
    env = {**os.environ, "PROMPTLAB_DB": str(served.db)}
    children = [
        subprocess.Popen(
            [sys.executable, "-m", "promptlab", "run", str(spec), "--quiet"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for spec in specs
    ]
    outputs = [child.communicate(timeout=120) for child in children]
    assert [child.returncode for child in children] == [0, 0], outputs
    stats = server.stats()
    assert stats["successes"] == 2 * ROWS
    # Each spec's endpoint allows 3 at once: one engine, one budget, never 6.
    assert stats["max_in_flight"] <= 3


def test_assign_answers_from_the_experiment_s_config(served: Served, demo_db: Path) -> None:
    served.stop()
    served.__init__(demo_db)  # type: ignore[misc]  # serve the demo database instead
    status, config = served.call("GET", "/v1/experiments/triage-split")
    assert status == 200
    units = [f"customer-{i}" for i in range(500)]
    status, answer = served.call(
        "POST", "/v1/assign", {"experiment": "triage-split", "unit_ids": units}
    )
    assert status == 200
    assert [a["variant"] for a in answer["assignments"]] == [
        assign(config, unit).variant for unit in units
    ]
    status, one = served.call("POST", "/v1/assign", {"experiment": "triage-split", "unit_id": "u1"})
    assert one["assignments"][0]["variant"] == assign(config, "u1").variant
    # `experiment run` goes through the server too: its estimate, then the run.
    result = CliRunner().invoke(
        main,
        [
            "--db",
            str(demo_db),
            "experiment",
            "run",
            "triage-split",
            "--dataset",
            "tickets",
            "--quiet",
        ],
    )
    assert result.exit_code == 0, result.output + result.stderr
    assert result.stdout.startswith("estimate: ") and ": completed" in result.stdout


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "message"),
    [
        ("GET", "/v1/runs/run_nope", None, 404, "run_nope"),
        ("POST", "/v1/runs", {"spec": {"name": "x"}}, 422, "run spec: 'dataset' must name"),
        ("POST", "/v1/assign", {"experiment": "x"}, 422, "give unit_id or 1 to 10,000"),
        ("POST", "/v1/assign", {"unit_id": "u"}, 422, "experiment: Field required"),
    ],
)
def test_bad_input_gets_one_line_and_a_status(
    served_once: Served, method: str, path: str, body: Any, status: int, message: str
) -> None:
    got, answer = served_once.call(method, path, body)
    assert got == status
    assert message in answer["error"] and "Traceback" not in answer["error"]


def test_a_body_over_the_bound_is_refused_before_it_is_read(served_once: Served) -> None:
    served = served_once
    host, port = served.info.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    connection.putrequest("POST", "/v1/runs")
    connection.putheader("Authorization", f"Bearer {served.info.token}")
    connection.putheader("Content-Length", str(9_000_000))
    connection.endheaders()  # and no body: the answer comes from the headers alone
    response = connection.getresponse()
    assert response.status == 413
    assert json.loads(response.read()) == {"error": "request body over 8,388,608 bytes"}


def test_an_import_retried_with_its_key_runs_once(served: Served, tmp_path: Path) -> None:
    rows = tmp_path / "rows.csv"
    rows.write_text("text\nhello\n")
    client = ServerClient(served.info)
    first = client.upload("/v1/datasets?name=once&filename=rows.csv", rows)
    assert first["name"] == "once"
    # The CLI's own retry after a dropped connection sends the same key again.
    again = CliRunner().invoke(main, ["dataset", "import", str(rows), "--name", "once"])
    assert again.exit_code != 0 and "once" in again.stderr


def test_a_discovery_file_others_could_write_is_not_followed(served: Served) -> None:
    path = discovery_path(served.db)
    path.chmod(0o644)  # another user could have written the URL: do not send them argv
    assert find_server(served.db) is None
    path.chmod(0o600)
    assert find_server(served.db) == served.info


def test_a_killed_server_loses_nothing_and_a_new_one_resumes(
    served: Served, tmp_path: Path, fakellm_factory: ServerFactory
) -> None:
    server = fakellm_factory(latency_ms=100)
    spec = yaml.safe_load(_spec(tmp_path, server).read_text())
    status, started = served.call(
        "POST", "/v1/runs", {"spec": spec, "base_dir": str(tmp_path), "default_name": "k"}
    )
    assert status == 201
    run_id = started["run_id"]
    deadline = time.monotonic() + 30
    while server.stats()["successes"] < 10:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    os.kill(served.proc.pid, signal.SIGKILL)
    served.proc.wait(10)
    # The discovery file is stale (its process is gone): clients open the file again.
    assert discovery_path(served.db).exists() and find_server(served.db) is None
    status_out = CliRunner().invoke(main, ["status", run_id])
    assert "interrupted (process gone)" in status_out.output
    restarted = Served(served.db)
    try:
        resumed = CliRunner().invoke(main, ["resume", run_id, "--quiet"])
        assert resumed.exit_code == 0, resumed.output + resumed.stderr
        assert f"run {run_id}: completed" in resumed.output
    finally:
        restarted.stop()
    assert succeeded(served.db, run_id) == (ROWS, ROWS)  # every item once, none lost or twice


def test_a_restarted_server_resumes_what_its_killed_owner_left(
    tmp_path: Path, db_path: Path, fakellm_factory: ServerFactory
) -> None:
    """`promptlab serve --resume-interrupted`: a run whose owner was killed (here a CLI
    process) goes on in the new server without anyone asking, every item once."""
    server = fakellm_factory(latency_ms=100)
    env = {**os.environ, "PROMPTLAB_DB": str(db_path)}
    owner = subprocess.Popen(
        [sys.executable, "-m", "promptlab", "run", str(_spec(tmp_path, server)), "--quiet"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    deadline = time.monotonic() + 60
    while server.stats()["successes"] < 10:
        assert time.monotonic() < deadline and owner.poll() is None
        time.sleep(0.02)
    owner.send_signal(signal.SIGKILL)
    owner.wait(10)
    restarted = Served(db_path, "--resume-interrupted")
    try:
        status, runs = restarted.call("GET", "/v1/runs")
        run_id = runs[0]["run_id"]
        while True:
            status, progress = restarted.call("GET", f"/v1/runs/{run_id}")
            if progress["status"] == "completed":
                break
            assert time.monotonic() < deadline + 60, progress
            time.sleep(0.1)
    finally:
        restarted.stop()
    assert succeeded(db_path, run_id) == (ROWS, ROWS)


def test_cancel_through_the_server_says_where_it_left_the_run(
    served: Served, tmp_path: Path, fakellm_factory: ServerFactory
) -> None:
    """A running run cancelled through the server: the line says `running -> cancelled`
    once its requests in flight are answered (it said `running -> running`)."""
    server = fakellm_factory()
    server.gate(0)  # every request held: the run is running when it is cancelled
    spec = yaml.safe_load(_spec(tmp_path, server).read_text())
    body = {"spec": spec, "base_dir": str(tmp_path)}
    status, started = served.call("POST", "/v1/runs", body, key="cancel-1")
    assert status == 201, started
    run_id = started["run_id"]
    deadline = time.monotonic() + 60
    while server.stats()["held"] == 0:  # running, with requests in flight
        assert time.monotonic() < deadline
        time.sleep(0.02)
    # The command waits for the requests in flight (held here): let them go once the
    # server has taken the cancel.
    done: list[Any] = []
    cancelling = threading.Thread(
        target=lambda: done.append(CliRunner().invoke(main, ["cancel", run_id]))
    )
    cancelling.start()
    try:
        taken = f"/v1/audit/events?kind=run.cancelled&run_id={run_id}"
        while not served.call("GET", taken)[1]:
            assert time.monotonic() < deadline
            time.sleep(0.02)
    finally:
        server.gate(None)
        cancelling.join(60)
    (result,) = done
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == f"run {run_id}: running -> cancelled"
