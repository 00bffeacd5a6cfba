"""The shipped alert rules fire in a real Prometheus (issue 59, item 4): Debian's
`prometheus` on loopback scrapes a served owner (its /metrics, with a token) and a
worker's metrics port (with its own) while a run on workers fails half its attempts;
then the worker is killed -9. PromptlabHighFailureRate and PromptlabWorkerLost must
fire. The rules are deploy/prometheus/alerts.yml as shipped, but for their `for:`
durations, set to 0 s here (promtool's unit tests, tests/test_alert_rules.py, hold the
durations against synthetic series)."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from promptlab.config import Settings
from promptlab.server.run import Serving
from promptlab.workbench import Workbench
from tests.cluster_fixtures import Workers, free_port, needs_redis
from tests.cluster_fixtures import redis_server as redis_server  # fixtures
from tests.cluster_fixtures import workers as workers
from tests.deb_tools import prometheus
from tests.fakellm_fixtures import ServerFactory
from tests.test_distributed import spec_data

ROOT = Path(__file__).resolve().parent.parent
RULES = ROOT / "deploy" / "prometheus" / "alerts.yml"
PROMETHEUS = prometheus()
WORKER_TOKEN = "a-token-for-the-worker-scrape"

pytestmark = [
    needs_redis,
    pytest.mark.skipif(PROMETHEUS is None, reason="prometheus is not installed (make test)"),
]


def rules_now(folder: Path) -> Path:
    """alerts.yml with every `for:` at 0 s: an alert fires at its first true evaluation."""
    rules = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    for group in rules["groups"]:
        for rule in group["rules"]:
            rule["for"] = "0s"
    path = folder / "alerts.yml"
    path.write_text(yaml.safe_dump(rules), encoding="utf-8")
    return path


def config(folder: Path, owner: str, owner_token: Path, worker_port: int) -> Path:
    """Scrape the owner and the worker every second; rules evaluated every second."""
    worker_token = folder / "worker.token"
    worker_token.write_text(WORKER_TOKEN + "\n")

    def job(name: str, target: str, token: Path) -> dict[str, Any]:
        return {
            "job_name": name,
            "authorization": {"type": "Bearer", "credentials_file": str(token)},
            "static_configs": [{"targets": [target]}],
        }

    data = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(rules_now(folder))],
        "scrape_configs": [
            job("promptlab", owner, owner_token),
            job("promptlab-workers", f"127.0.0.1:{worker_port}", worker_token),
        ],
    }
    path = folder / "prometheus.yml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


@pytest.fixture
def start_prometheus(tmp_path: Path) -> Iterator[Any]:
    procs: list[subprocess.Popen[bytes]] = []

    def start(config_file: Path) -> str:
        assert PROMETHEUS is not None
        port = free_port()
        log = (tmp_path / "prometheus.log").open("wb")
        argv = [
            str(PROMETHEUS),
            f"--config.file={config_file}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ]
        procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT))
        base = f"http://127.0.0.1:{port}"
        until(lambda: _get(f"{base}/-/ready") is not None, "prometheus ready", procs[0])
        return base

    yield start
    for proc in procs:
        proc.terminate()
        proc.wait(30)


def _get(url: str) -> Any:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:  # noqa: S310 - loopback
            body = resp.read()
    except (urllib.error.URLError, ConnectionError):
        return None
    try:
        return json.loads(body)
    except ValueError:
        return body


def until(check: Any, what: str, proc: subprocess.Popen[bytes] | None = None) -> None:
    deadline = time.monotonic() + 120
    while not check():
        assert proc is None or proc.poll() is None, f"{what}: the process exited"
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def firing(base: str) -> set[str]:
    answer = _get(f"{base}/api/v1/alerts") or {}
    alerts = answer.get("data", {}).get("alerts", []) if isinstance(answer, dict) else []
    return {a["labels"]["alertname"] for a in alerts if a["state"] == "firing"}


def value(base: str, query: str) -> float | None:
    """The query's one value now, or None."""
    url = f"{base}/api/v1/query?{urllib.parse.urlencode({'query': query})}"
    answer = _get(url) or {}
    result = answer.get("data", {}).get("result", []) if isinstance(answer, dict) else []
    return float(result[0]["value"][1]) if len(result) == 1 else None


def test_failures_and_a_killed_worker_fire_the_shipped_alerts(
    workers: Workers,
    fakellm_factory: ServerFactory,
    start_prometheus: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = fakellm_factory(fail_rate=0.5, latency_ms=100)
    monkeypatch.setenv("PROMPTLAB_BROKER_URL", workers.url)
    worker_token, worker_port = tmp_path / "w.token", free_port()
    worker_token.write_text(WORKER_TOKEN + "\n")
    workers.extra_args = ["--metrics-port", str(worker_port)]
    workers.extra_args += ["--metrics-token-file", str(worker_token)]
    workers.start(1)
    with Workbench.open(Settings.from_env()) as wb:
        serving = Serving(wb, "127.0.0.1", 0).start()
        try:
            owner_token = tmp_path / "owner.token"
            owner_token.write_text(serving.info.token + "\n")
            owner = serving.info.url.removeprefix("http://")
            base = start_prometheus(config(tmp_path, owner, owner_token, worker_port))
            spec = spec_data(server, 120, tmp_path, concurrency=8)
            run_id = wb.runs.start(wb.runs.spec_from_data(spec))
            until(lambda: "PromptlabHighFailureRate" in firing(base), "failure-rate alert")
            assert "PromptlabWorkerLost" not in firing(base)
            # Killed once the run is over: nothing of it waits on the dead worker (a
            # cancel waits for what is in flight, up to each request's timeout).
            wb.runs.wait(run_id, timeout=120)
            workers.kill(0)
            until(lambda: "PromptlabWorkerLost" in firing(base), "worker-lost alert")
            # Both views of it: the worker's port stopped answering, and the owner saw its
            # heartbeat stop without a goodbye.
            until(lambda: value(base, 'up{job="promptlab-workers"}') == 0, "up 0")
            until(lambda: value(base, "promptlab_workers_lost") == 1, "lost by the owner")
        finally:
            serving.stop()
