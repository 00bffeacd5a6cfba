"""`promptlab gateway`: serve the live gateway's routes from a process with no database,
beside an owner started with `promptlab serve --gateway-relay` (promptlab/gateway/
standalone.py)."""

from __future__ import annotations

import logging
import socket
from pathlib import Path
from typing import Any

import click

from promptlab.audit.logjson import say
from promptlab.cli.common import handle_errors

#: Where a gateway keeps its journal unless --state-dir says (one folder per port).
STATE_HOME = Path("~/.local/state/promptlab")


@click.command("gateway")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--port", type=click.IntRange(0, 65535), default=8790, show_default=True, help="Port."
)
@click.option(
    "--state-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Folder of this gateway's journal (default ~/.local/state/promptlab/gateway-PORT); "
    "start a killed gateway on the same folder and it hands on what the journal holds.",
)
@click.option("--name", default=None, help="This gateway's name in the records (HOST:PORT).")
@handle_errors
def gateway_command(host: str, port: int, state_dir: Path | None, name: str | None) -> None:
    """Answer `POST /v1/chat/completions` and `POST /v1/messages` for applications, from
    a process with no database (run several, behind one load balancer).

    What to serve and which gateway tokens may call come from the owner's snapshot in
    Redis (PROMPTLAB_BROKER_URL; the owner runs `promptlab serve --gateway-relay`),
    read again every 0.25 s: a kill or a ramp reaches every gateway within a second.
    Each answered call is written to this gateway's journal, then to Redis, where the
    owner stores it; a gateway keeps answering while the owner is down or restarting.
    Endpoints and keys are this process's providers file's (PROMPTLAB_PROVIDERS), and
    each endpoint's limits are this process's alone. Records are signed with the
    secret the owner and workers share (PROMPTLAB_WORKER_SECRET). docs/how-to/gateway.md.
    """
    import redis
    import uvicorn

    from promptlab.audit.logjson import uvicorn_logging
    from promptlab.config import Settings
    from promptlab.distributed.settings import broker_url
    from promptlab.distributed.trust import worker_secret
    from promptlab.gateway.standalone import StandaloneGateway, StateFolder
    from promptlab.providers import load_endpoints
    from promptlab.server.run import StoppingServer, listening

    settings = Settings.from_env()
    broker = broker_url()
    secret = worker_secret(broker)
    endpoints = load_endpoints(settings.providers_file)
    sock = listening(host, port)
    bound_port = sock.getsockname()[1]
    folder = (state_dir or STATE_HOME / f"gateway-{port}").expanduser()
    state = StateFolder(folder)
    client = redis.Redis.from_url(broker, socket_timeout=5, socket_connect_timeout=5)
    parts = StandaloneGateway(
        client,
        secret,
        endpoints,
        state,
        name or f"{socket.gethostname()}:{bound_port}",
        settings.gateway_fold_s,
    ).start()
    config: dict[str, Any] = {"log_level": "warning", "access_log": False, "lifespan": "off"}
    server = StoppingServer(uvicorn.Config(parts.app, **(config | uvicorn_logging())))
    shown = f"[{host}]" if sock.family == socket.AF_INET6 else host
    say(f"gateway {parts.name} at http://{shown}:{bound_port} (journal in {folder}); Ctrl-C stops")
    if parts.follower.problem:
        say(f"warning: {parts.follower.problem}", logging.WARNING)
    try:
        server.run(sockets=[sock])
    finally:
        parts.close()


commands: list[click.Command] = [gateway_command]
