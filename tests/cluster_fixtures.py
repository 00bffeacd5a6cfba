"""A real Redis and real Celery workers (`promptlab worker` processes) on loopback, for
the distributed tests and the bench: started on free ports, stopped afterwards. Owner
and workers sign tasks with a secret file in the test's own folder."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

REDIS_SERVER = shutil.which("redis-server")
needs_redis = pytest.mark.skipif(REDIS_SERVER is None, reason="redis-server is not installed")
#: Seconds before a killed worker's unacknowledged chunks are delivered again.
TEST_VISIBILITY_TIMEOUT_S = 5


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisServer:
    """`redis-server` on a free loopback port, keeping nothing on disk."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.start()

    def start(self) -> None:
        assert REDIS_SERVER is not None
        folder = self.folder
        self.proc = subprocess.Popen(
            [
                REDIS_SERVER,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(folder),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        import redis

        client = redis.Redis.from_url(self.url)
        deadline = time.monotonic() + 15
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                assert time.monotonic() < deadline and self.proc.poll() is None, "no redis"
                time.sleep(0.05)
        client.close()

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)

    def restart(self) -> None:
        """Stopped, then started again on the same port, empty (nothing kept on disk)."""
        self.stop()
        self.start()


class Workers:
    """`promptlab worker` processes on one broker; `start()` adds one and waits for it."""

    def __init__(self, url: str, folder: Path, concurrency: int = 64) -> None:
        self.url = url
        self.folder = folder
        self.concurrency = concurrency
        self.procs: list[subprocess.Popen[bytes]] = []
        #: Variables the workers started next get besides this process's own.
        self.extra_env: dict[str, str] = {}
        #: Options the workers started next get (`--metrics-port`, ...).
        self.extra_args: list[str] = []

    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "PROMPTLAB_BROKER_URL": self.url,
            "PROMPTLAB_VISIBILITY_TIMEOUT_S": str(TEST_VISIBILITY_TIMEOUT_S),
            **self.extra_env,
        }

    def log(self, index: int = 0) -> str:
        return (self.folder / f"worker-{index}.log").read_text(errors="replace")

    def start(self, count: int = 1) -> None:
        for _ in range(count):
            log = (self.folder / f"worker-{len(self.procs)}.log").open("wb")
            self.procs.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "promptlab",
                        "worker",
                        "--concurrency",
                        str(self.concurrency),
                        "--loglevel",
                        "info",
                        *self.extra_args,
                    ],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=self.env(),
                )
            )
        self.wait_ready(len([p for p in self.procs if p.poll() is None]))

    def wait_ready(self, count: int) -> None:
        """Until `count` workers answer a ping (each consumes from the queue then)."""
        from promptlab.distributed.app import make_app

        app = make_app(self.url)
        deadline = time.monotonic() + 60
        # `limit`: return once `count` have answered, not at the end of the timeout.
        while len(app.control.ping(timeout=0.5, limit=count) or []) < count:
            assert time.monotonic() < deadline, "the workers did not start"
            assert all(p.poll() is None for p in self.procs), "a worker exited"

    def kill(self, index: int) -> None:
        """kill -9 one worker (its threads and what they were sending die with it)."""
        self.procs[index].send_signal(signal.SIGKILL)
        self.procs[index].wait(10)

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()


@pytest.fixture
def redis_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[RedisServer]:
    if REDIS_SERVER is None:
        pytest.skip("redis-server is not installed")
    # Owners here and the workers they start (which inherit this environment) share a
    # secret file of the test's own, never the developer's.
    monkeypatch.delenv("PROMPTLAB_WORKER_SECRET", raising=False)
    monkeypatch.setenv("PROMPTLAB_WORKER_SECRET_FILE", str(tmp_path / "worker-secret"))
    server = RedisServer(tmp_path)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def workers(redis_server: RedisServer, tmp_path: Path) -> Iterator[Workers]:
    """No worker yet: a test starts as many as it needs (`workers.start(2)`)."""
    cluster = Workers(redis_server.url, tmp_path)
    try:
        yield cluster
    finally:
        cluster.stop()
