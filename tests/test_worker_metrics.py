"""Workers you can see (issue 59, item 4): each worker serves its own figures to a scrape
that carries its token, and the owner's `/metrics` says what waits in a queue, how long
its oldest chunk has waited, and which workers are alive or were lost. Real
`promptlab worker` processes, a real Redis, fakellm on loopback."""

from __future__ import annotations

import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families

from promptlab.cli import main
from promptlab.config import Settings
from promptlab.distributed.worker_metrics import MetricsServer, WorkerMetrics
from promptlab.server.metrics import metrics_response
from promptlab.workbench import Workbench
from tests.cluster_fixtures import Workers, free_port, needs_redis
from tests.cluster_fixtures import redis_server as redis_server  # fixtures
from tests.cluster_fixtures import workers as workers
from tests.fakellm_fixtures import ServerFactory
from tests.test_distributed import spec_data

TOKEN = "a-scrape-token-for-the-tests"


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of an exposition, by name and sorted labels."""
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def scrape(port: int, token: str | None = TOKEN, path: str = "/metrics") -> tuple[int, str]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:  # noqa: S310 - loopback
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_a_worker_s_figures_go_only_to_a_scrape_with_its_token() -> None:
    metrics = WorkerMetrics({"fake"})
    metrics.ticket("fake", "sent", 3)
    metrics.ticket("an endpoint\nof a spec", "reused")  # not configured: counted as other
    server = MetricsServer(metrics.registry, "127.0.0.1", 0, TOKEN).start()
    try:
        assert scrape(server.port, token=None)[0] == 401
        assert scrape(server.port, token="not-the-token-at-all")[0] == 401
        assert scrape(server.port, path="/")[0] == 404
        status, text = scrape(server.port)
    finally:
        server.stop()
    assert status == 200
    seen = samples(text)
    sent = (("endpoint", "fake"), ("outcome", "sent"))
    assert seen[("promptlab_worker_tickets_total", sent)] == 3
    other = (("endpoint", "other"), ("outcome", "reused"))
    assert seen[("promptlab_worker_tickets_total", other)] == 1
    assert seen[("promptlab_worker_tasks_total", (("outcome", "accepted"),))] == 0


def test_metrics_options_are_refused_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No token file, a token too short, a port taken: each one line, before any task."""
    monkeypatch.setenv("PROMPTLAB_WORKER_SECRET_FILE", str(tmp_path / "secret"))
    monkeypatch.setenv("PROMPTLAB_BROKER_URL", "redis://127.0.0.1:1/0")
    runner = CliRunner()
    out = runner.invoke(main, ["worker", "--metrics-port", "0"])
    assert out.exit_code == 2 and "--metrics-port needs --metrics-token-file" in out.output
    short = tmp_path / "short.token"
    short.write_text("abc\n")
    out = runner.invoke(main, ["worker", "--metrics-port", "0", "--metrics-token-file", str(short)])
    assert out.exit_code == 1
    assert f"--metrics-token-file {short}: its first line must hold a token" in out.output
    token = tmp_path / "ok.token"
    token.write_text(TOKEN + "\n")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = runner.invoke(
            main, ["worker", "--metrics-port", str(port), "--metrics-token-file", str(token)]
        )
    assert out.exit_code == 1
    assert f"--metrics-port: cannot listen on 127.0.0.1:{port}" in out.output
    assert "Traceback" not in out.output


def owner_view(wb: Workbench) -> dict[str, float]:
    """The owner's worker figures from its /metrics, by series (queue `promptlab`)."""
    seen = samples(metrics_response(wb)[0].decode())
    names = ("promptlab_worker_broker_up", "promptlab_workers_alive", "promptlab_workers_lost")
    view = {name: seen[(name, ())] for name in names}
    for name in ("promptlab_worker_queue_depth", "promptlab_worker_queue_oldest_seconds"):
        view[name] = seen[(name, (("queue", "promptlab"),))]
    return view


def until(check: Callable[[], bool], what: str, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


@needs_redis
def test_workers_are_seen_waiting_sending_leaving_and_lost(
    workers: Workers,
    fakellm_factory: ServerFactory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = fakellm_factory()
    monkeypatch.setenv("PROMPTLAB_BROKER_URL", workers.url)
    token_file = tmp_path / "metrics.token"
    token_file.write_text(TOKEN + "\n")
    port = free_port()
    workers.extra_args = ["--metrics-port", str(port), "--metrics-token-file", str(token_file)]
    with Workbench.open(Settings.from_env()) as wb:
        run_id = wb.runs.start(wb.runs.spec_from_data(spec_data(server, 60, tmp_path)))
        # No worker yet: its first chunks (16 in flight) wait in the queue, and the owner
        # says so.
        until(lambda: owner_view(wb)["promptlab_worker_queue_depth"] >= 1, "chunks queued")
        view = owner_view(wb)
        assert view["promptlab_worker_broker_up"] == 1
        assert view["promptlab_workers_alive"] == 0
        assert view["promptlab_worker_queue_oldest_seconds"] > 0
        workers.start(1)
        assert str(wb.runs.wait(run_id, timeout=120).status) == "completed"
        view = owner_view(wb)
        assert view["promptlab_workers_alive"] == 1 and view["promptlab_workers_lost"] == 0
        assert view["promptlab_worker_queue_depth"] == 0
        assert view["promptlab_worker_queue_oldest_seconds"] == 0
        seen = samples(scrape(port)[1])
        assert seen[("promptlab_worker_tasks_total", (("outcome", "accepted"),))] >= 3
        sent = (("endpoint", "other"), ("outcome", "sent"))  # the spec's own endpoint
        assert seen[("promptlab_worker_tickets_total", sent)] == 60
        assert seen[("promptlab_worker_send_seconds_count", (("endpoint", "other"),))] == 60
        assert seen[("promptlab_worker_in_flight", (("endpoint", "other"),))] == 0
        assert seen[("promptlab_worker_heartbeat_timestamp_seconds", ())] > time.time() - 60
        # A second worker stopped on purpose leaves; the first, killed, is lost.
        workers.extra_args = []
        workers.start(1)
        until(lambda: owner_view(wb)["promptlab_workers_alive"] == 2, "two alive")
        workers.procs[1].terminate()
        workers.procs[1].wait(30)
        view = owner_view(wb)
        assert (view["promptlab_workers_alive"], view["promptlab_workers_lost"]) == (1, 0)
        workers.kill(0)
        until(lambda: owner_view(wb)["promptlab_workers_lost"] == 1, "the killed one lost")
        assert owner_view(wb)["promptlab_workers_alive"] == 0
