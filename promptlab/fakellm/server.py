"""fakellm: the simulated model served over HTTP, in OpenAI and Anthropic wire format.

Loopback only. `POST /v1/chat/completions` (OpenAI, streaming included), `POST
/v1/messages` (Anthropic), `GET /_stats`, `GET /_requests` (the last request bodies
received, for tests to assert on), `POST /_reset`, `POST /_gate` (answer the first N
requests, hold the rest in flight: a test steps the server instead of racing it), and
both providers' Batch APIs (OpenAI `/v1/files` and `/v1/batches`, Anthropic
`/v1/messages/batches`; `GET /_batches` lists them: fakellm/batch_routes.py). The
app is in promptlab/fakellm/app.py, its switches in config.py, its rate limits in
limits.py; this module runs it, in a background thread (`serve_in_thread`) or until
interrupted (`run`, the `promptlab fakellm` command).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from promptlab.clock import SYSTEM_CLOCK, Clock
from promptlab.fakellm.app import create_app
from promptlab.fakellm.config import FakeLLMConfig
from promptlab.fakellm.limits import TokenBucket
from promptlab.providers.simulator import SIMULATED_LABEL

#: How long the runner waits for held requests (timeout fault) when stopping.
SHUTDOWN_TIMEOUT_S = 0.5


@dataclass(frozen=True)
class RunningServer:
    """A fakellm serving in a background thread."""

    base_url: str
    config: FakeLLMConfig

    @property
    def openai_base_url(self) -> str:
        return f"{self.base_url}/v1"

    @property
    def anthropic_base_url(self) -> str:
        return self.base_url

    def stats(self) -> dict[str, Any]:
        """GET /_stats."""
        with urllib.request.urlopen(f"{self.base_url}/_stats") as resp:  # noqa: S310 - loopback
            data: dict[str, Any] = json.loads(resp.read())
            return data

    def requests(self) -> list[dict[str, Any]]:
        """GET /_requests: the last request bodies received, oldest first."""
        with urllib.request.urlopen(f"{self.base_url}/_requests") as resp:  # noqa: S310
            data: list[dict[str, Any]] = json.loads(resp.read())
            return data

    def batches(self) -> list[dict[str, Any]]:
        """GET /_batches: every batch's id, format, status and request counts, oldest first."""
        with urllib.request.urlopen(f"{self.base_url}/_batches") as resp:  # noqa: S310
            data: list[dict[str, Any]] = json.loads(resp.read())
            return data

    def gate(self, answer_below: int | None) -> None:
        """POST /_gate: answer the requests numbered below `answer_below` in arrival
        order (from 0 at start) and hold later ones in flight; None answers every one."""
        data = json.dumps({"answer_below": answer_below}).encode()
        req = urllib.request.Request(f"{self.base_url}/_gate", method="POST", data=data)
        req.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(req):  # noqa: S310 - loopback
            pass

    def reset(self) -> None:
        """POST /_reset: zero the stats, forget the requests and batches, refill the buckets."""
        req = urllib.request.Request(f"{self.base_url}/_reset", method="POST", data=b"")
        with urllib.request.urlopen(req):  # noqa: S310 - loopback
            pass


@contextlib.contextmanager
def serve_in_thread(
    config: FakeLLMConfig | None = None, clock: Clock = SYSTEM_CLOCK
) -> Iterator[RunningServer]:
    """Run fakellm on its own loop in a daemon thread; port 0 picks a free port. Its
    rate limits refill by `clock`."""
    config = config or FakeLLMConfig(port=0)
    ready = threading.Event()
    loop = asyncio.new_event_loop()
    holder: dict[str, Any] = {}

    async def start() -> None:
        runner = web.AppRunner(
            create_app(config, clock),
            access_log=None,
            shutdown_timeout=SHUTDOWN_TIMEOUT_S,
            handler_cancellation=True,
        )
        await runner.setup()
        site = web.TCPSite(runner, config.host, config.port)
        await site.start()
        holder["runner"] = runner
        holder["port"] = runner.addresses[0][1]

    def run() -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(start())
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            holder["error"] = exc
            ready.set()
            return
        ready.set()
        loop.run_forever()
        loop.run_until_complete(holder["runner"].cleanup())
        loop.close()

    thread = threading.Thread(target=run, name="fakellm", daemon=True)
    thread.start()
    ready.wait()
    if "error" in holder:
        raise holder["error"]
    try:
        yield RunningServer(f"http://{config.host}:{holder['port']}", config)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)


def run(config: FakeLLMConfig, announce: Any = print) -> None:
    """Serve until interrupted (the `promptlab fakellm` command)."""
    try:
        import uvloop  # optional: faster, used only when installed

        uvloop.install()
    except ImportError:
        pass
    # Bound before it is announced: a port another server holds is one line (OSError,
    # which the command says), never a traceback after a line claiming to serve.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind((config.host, config.port))
    except OSError:
        sock.close()
        raise
    base = f"http://{config.host}:{sock.getsockname()[1]}"
    announce(
        f"fakellm ({SIMULATED_LABEL} model) on {base}  "
        f"OpenAI base_url={base}/v1  Anthropic base_url={base}  stats: {base}/_stats"
    )
    web.run_app(
        create_app(config),
        sock=sock,
        access_log=None,
        print=None,
        shutdown_timeout=SHUTDOWN_TIMEOUT_S,
        handler_cancellation=True,
    )


__all__ = [
    "FakeLLMConfig",
    "RunningServer",
    "TokenBucket",
    "create_app",
    "run",
    "serve_in_thread",
]
