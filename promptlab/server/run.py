"""Serving a workbench: bind, announce (the discovery file), serve, and clean up.

`promptlab serve` runs it in the foreground; the app runs it on a thread beside its
pages when PROMPTLAB_SERVE names an address (`make run` does), so the app, the API and
the CLI share one owner of the database and one engine. Serving is what makes a process
the long-lived owner: it takes over the runs left waiting (`after:`) and runs the
scheduler (promptlab/schedules/) while it serves.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import signal
import socket
import threading
from collections.abc import Iterator
from typing import Any

import uvicorn

from promptlab.audit.logjson import uvicorn_logging
from promptlab.errors import ConfigError
from promptlab.schedules.scheduler import Scheduler
from promptlab.server.api import create_app
from promptlab.server.backup_watch import BackupWatch
from promptlab.server.discovery import ServerInfo, new_token, remove_discovery, write_discovery
from promptlab.server.gateway_relay import GatewayRelay
from promptlab.server.periodic import Periodic
from promptlab.workbench import Workbench

LOOPBACK_NAMES = ("localhost",)
#: Connections the kernel queues before the server accepts them.
BACKLOG = 2048


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class StoppingServer(uvicorn.Server):
    """uvicorn's server, except that SIGINT and SIGTERM stop it and return: uvicorn raises
    the signal again after its shutdown, which would kill the process before the engine
    finishes its in-flight requests and the discovery file is removed."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        stops = (signal.SIGINT, signal.SIGTERM)
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in stops}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        await super().shutdown(sockets)
        # The live gateway's provider connections live on this loop: closed before it ends
        # (the API's app, and a `promptlab gateway` process's, keep them on `state`).
        gateways = getattr(getattr(self.config.app, "state", None), "gateways", None)
        if gateways is not None:
            await gateways.aclose_connections()


def backups_of(wb: Workbench) -> BackupWatch | None:
    settings = wb.settings
    if settings.backup_every_s is None:
        return None
    return BackupWatch(
        wb.backup, settings.backup_folder(), settings.backup_every_s, settings.backup_keep
    )


def listening(host: str, port: int) -> socket.socket:
    """A socket bound to `host:port` and listening; a taken port is one line."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ConfigError(
            f"cannot listen on {host}:{port}: {exc.strerror or exc} (another server has "
            "it? choose another with --port)"
        ) from None
    sock.listen(BACKLOG)
    return sock


def relay_of(wb: Workbench) -> GatewayRelay | None:
    if not wb.settings.gateway_relay:
        return None
    import redis

    from promptlab.distributed.settings import broker_url
    from promptlab.distributed.trust import worker_secret

    url = broker_url()
    client = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)
    return GatewayRelay(wb, client, worker_secret(url))


class Serving:
    """A bound, announced server of one workbench: `run()` here, or `start()` a thread."""

    def __init__(self, wb: Workbench, host: str = "127.0.0.1", port: int = 8765) -> None:
        self.wb = wb
        self.local = is_loopback(host)
        # Listening before the discovery file names it: a client that finds the file can
        # connect at once (its connection waits in the backlog until uvicorn accepts).
        self._sock = listening(host, port)
        shown = f"[{host}]" if self._sock.family == socket.AF_INET6 else host
        self.info = ServerInfo(
            f"http://{shown}:{self._sock.getsockname()[1]}", new_token(), os.getpid()
        )
        self._thread: threading.Thread | None = None
        config: dict[str, Any] = {"log_level": "warning", "access_log": False, "lifespan": "off"}
        config |= uvicorn_logging()  # PROMPTLAB_LOG_FORMAT=json: uvicorn's lines are JSON too
        self._app = create_app(wb, self.info.token, local_paths=self.local)
        self._server = StoppingServer(uvicorn.Config(self._app, **config))
        gateways = self._app.state.gateways

        def check_rollouts() -> object:
            gateways.settle()  # the calls answered so far count
            return wb.rollouts.check_all()

        #: Guarded rollouts checked every PROMPTLAB_ROLLOUT_CHECK_S while this serves.
        self.rollouts = Periodic(
            "promptlab-rollouts", wb.settings.rollout_check_s, check_rollouts, "checking rollouts"
        )
        #: Rotating backups, when PROMPTLAB_BACKUP_EVERY (or serve's --backup-every) asks.
        self.backups = backups_of(wb)
        #: `promptlab gateway` processes served through the broker, when asked.
        self.relay = relay_of(wb)
        self._app.state.relay = self.relay
        write_discovery(wb.settings.db_path, self.info)

    def run(self) -> None:
        """Serve until SIGINT or SIGTERM; then the discovery file is removed."""
        scheduler = Scheduler(self.wb.schedules, self.wb.store.clock)
        try:
            self.wb.engine.adopt_waiting()
            scheduler.start()
            self.rollouts.start()
            if self.backups is not None:
                self.backups.start()
            if self.relay is not None:
                self.relay.start()
            self._server.run(sockets=[self._sock])
        finally:
            scheduler.stop()
            self.rollouts.stop()
            if self.backups is not None:
                self.backups.stop()
            if self.relay is not None:
                self.relay.stop()
            self._app.state.jobs.close()  # before the workbench closes under them
            self._app.state.gateways.close()  # the live calls' journal, folded
            remove_discovery(self.wb.settings.db_path, self.info)

    def start(self) -> Serving:
        """Serve on a daemon thread (beside the app's pages); `stop()` ends it."""
        self._thread = threading.Thread(target=self.run, name="promptlab-serve", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout_s)
        remove_discovery(self.wb.settings.db_path, self.info)
