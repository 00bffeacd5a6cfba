"""`promptlab serve`: own the database and the engine; serve the API (promptlab/server)."""

from __future__ import annotations

import contextlib
import ipaddress
import os
import signal
import socket
import threading
from collections.abc import Iterator

import click

from promptlab.cli.common import db_option, handle_errors, settings_from

LOOPBACK_NAMES = ("localhost",)


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@click.command("serve")
@db_option
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on; anything but loopback is warned about.")  # fmt: skip
@click.option("--port", type=click.IntRange(0, 65535), default=8765, show_default=True,
              help="Port (0: any free one).")  # fmt: skip
@click.pass_context
@handle_errors
def serve_command(ctx: click.Context, host: str, port: int) -> None:
    """Own the database and the one engine, and serve the HTTP API to every client.

    While it runs, `promptlab run`, `batch`, `resume`, `cancel`, `status` and
    `batch-output` on the same database go through it (they find it by a file beside
    the database, readable by you only, holding the URL and the token), so runs from
    several terminals share one engine and its rate budget. The API wants the token
    (`Authorization: Bearer TOKEN`); its OpenAPI description is at /openapi.json and
    Prometheus metrics at /metrics.
    """
    import uvicorn

    from promptlab.server.api import create_app
    from promptlab.server.discovery import (
        ServerInfo,
        discovery_path,
        new_token,
        remove_discovery,
        write_discovery,
    )
    from promptlab.workbench import Workbench

    _Server = _server_class()
    settings = settings_from(ctx)
    local = is_loopback(host)
    if not local:
        click.echo(
            f"warning: listening on {host}, not loopback: anyone who can reach it and has "
            "the token can run requests with your keys; put TLS in front of it",
            err=True,
        )
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    # Listening before the discovery file names it: a client that finds the file can
    # connect at once (its connection waits in the backlog until uvicorn accepts).
    sock.listen(2048)
    bound = sock.getsockname()[1]
    with Workbench.open(settings) as wb:
        wb.engine  # noqa: B018 - start it now: a bad providers file is a clear error first
        token = new_token()
        shown = f"[{host}]" if family == socket.AF_INET6 else host
        info = ServerInfo(f"http://{shown}:{bound}", token, os.getpid())
        app = create_app(wb, token, local_paths=local)
        server = _Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off"))
        write_discovery(settings.db_path, info)
        click.echo(
            f"serving {settings.db_path} at {info.url} (token in "
            f"{discovery_path(settings.db_path)}); Ctrl-C stops",
            err=True,
        )
        try:
            server.run(sockets=[sock])
        finally:
            remove_discovery(settings.db_path, info)


def _server_class() -> type:
    import uvicorn

    class Server(uvicorn.Server):
        """uvicorn's server, except that SIGINT and SIGTERM stop it and return: uvicorn
        raises the signal again after its shutdown, which would kill the process before
        the engine finishes its in-flight requests and the discovery file is removed."""

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

    return Server


commands: list[click.Command] = [serve_command]
