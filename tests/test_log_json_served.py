"""Logs a collector takes whole (issue 59, item 6): with PROMPTLAB_LOG_FORMAT=json, every
line a served team's processes print is one JSON object. A real `promptlab serve` owns
the database, exporting traces to an OTLP receiver that is gone (its exporter's retry
warnings come from a child process); a real `promptlab worker` sends one run's calls
(fakellm failing some: the worker's lines name the run and the item); another run stops
on a quota refusal (the server says so in one line); the CLI's requests get access
lines naming who asked."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from promptlab.server.discovery import find_server
from tests.cluster_fixtures import Workers, free_port, needs_redis
from tests.cluster_fixtures import redis_server as redis_server  # fixtures
from tests.cluster_fixtures import workers as workers
from tests.fakellm_fixtures import ServerFactory
from tests.test_distributed import spec_data

REQUIRED = ("time", "level", "logger", "message")
RUN_ID = re.compile(r"\brun_[0-9a-f]{12}\b")

pytestmark = needs_redis


def parsed(text: str, where: str) -> list[dict[str, Any]]:
    """Every line of `text` as one JSON object with the fields a collector keys on."""
    lines = []
    for number, line in enumerate(text.splitlines(), 1):
        try:
            record = json.loads(line)
        except ValueError:
            raise AssertionError(f"{where} line {number} is not JSON: {line!r}") from None
        assert all(isinstance(record.get(f), str) for f in REQUIRED), (where, number, line)
        lines.append(record)
    return lines


def cli(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "promptlab", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    found = RUN_ID.search(done.stdout + done.stderr)
    assert found, (done.returncode, done.stdout, done.stderr)
    return found.group(0)


def test_every_line_of_a_served_team_is_json(
    workers: Workers, fakellm_factory: ServerFactory, tmp_path: Path
) -> None:
    flaky = fakellm_factory(fail_rate=0.3)
    broke = fakellm_factory(quota_rate=1.0)
    db = tmp_path / "team.duckdb"
    env = {k: v for k, v in os.environ.items() if k not in ("PROMPTLAB_SERVER", "PROMPTLAB_TOKEN")}
    env |= {
        "PROMPTLAB_LOG_FORMAT": "json",
        "PROMPTLAB_BROKER_URL": workers.url,
        "PROMPTLAB_DB": str(db),
        # A receiver that went away: nothing listens there.
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{free_port()}",
        "OTEL_EXPORTER_OTLP_TIMEOUT": "2",
    }
    workers.extra_env["PROMPTLAB_LOG_FORMAT"] = "json"
    workers.start(1)
    out = (tmp_path / "serve.out").open("wb")
    serve = subprocess.Popen(
        [sys.executable, "-m", "promptlab", "serve", "--port", "0"],
        stdout=out,
        stderr=subprocess.STDOUT,
        env=env,
        cwd=tmp_path,
    )
    try:
        deadline = time.monotonic() + 120
        while find_server(db, {}) is None:
            assert serve.poll() is None and time.monotonic() < deadline, "no server"
            time.sleep(0.05)
        on_workers = tmp_path / "workers.yaml"
        on_workers.write_text(yaml.safe_dump(spec_data(flaky, 40, tmp_path, name="flaky")))
        stopping = spec_data(broke, 5, tmp_path, name="broke")
        del stopping["executor"]
        stopped = tmp_path / "stops.yaml"
        stopped.write_text(yaml.safe_dump(stopping))
        worked = cli(env, "run", str(on_workers))
        quota = cli(env, "run", str(stopped))
    finally:
        serve.send_signal(signal.SIGINT)
        serve.wait(60)
        out.close()
        workers.stop()
    served = parsed((tmp_path / "serve.out").read_text(), "serve")
    said = [(str(r["logger"]), str(r["message"])) for r in served]
    # The trace exporter's child: each failure to reach the receiver, as JSON.
    assert any(logger.startswith("opentelemetry") for logger, _ in said), said
    # The run that stopped on its quota, said once by the process that owned it.
    ends = [r for r in served if r.get("run_status") and r.get("run_id") == quota]
    assert len(ends) == 1 and "stopped" in str(ends[0]["reason"]), ends
    # An access line per request, naming who asked.
    access = [r for r in served if r["logger"] == "promptlab.server.access"]
    assert access and all(r["principal"] != "-" for r in access if r["status"] < 400)
    assert any(r["path"] == "/v1/runs" and r["method"] == "POST" for r in access)
    # The worker's lines about the run name it, and the failed calls name their item.
    worker = parsed(workers.log(0), "worker")
    about = [r for r in worker if r.get("run_id") == worked]
    assert any(str(r["message"]).startswith("chunk of ") for r in about), worker
    assert any(r.get("item_key") and "answered server" in str(r["message"]) for r in about)
