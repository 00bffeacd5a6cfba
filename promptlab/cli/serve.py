"""`promptlab serve`: own the database and the engine; serve the API (promptlab/server)."""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import click

from promptlab.audit.logjson import say
from promptlab.cli.common import db_option, handle_errors, settings_from
from promptlab.errors import PromptlabError

if TYPE_CHECKING:
    from promptlab.config import Settings
    from promptlab.workbench import Workbench


@click.command("serve")
@db_option
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to listen on; anything but loopback is warned about.",
)
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=8765,
    show_default=True,
    help="Port (0: any free one).",
)
@click.option(
    "--resume-interrupted",
    is_flag=True,
    help="On start, resume every run whose owning process is gone (killed).",
)
@click.option(
    "--backup-every",
    default=None,
    help="Take a consistent backup this often while serving (90s, 30m, 1h, 1d; "
    "PROMPTLAB_BACKUP_EVERY).",
)
@click.option(
    "--backup-keep",
    type=click.IntRange(1),
    default=None,
    help="Backups kept, the oldest deleted first (PROMPTLAB_BACKUP_KEEP; default 48).",
)
@click.option(
    "--backup-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Folder of the backups (PROMPTLAB_BACKUP_DIR; default: backups/ beside the database).",
)
@click.option(
    "--gateway-relay",
    is_flag=True,
    help="Serve `promptlab gateway` processes through the broker (PROMPTLAB_BROKER_URL): "
    "publish experiments, versions and gateway tokens, store the calls they record "
    "(PROMPTLAB_GATEWAY_RELAY=1).",
)
@click.pass_context
@handle_errors
def serve_command(
    ctx: click.Context,
    host: str,
    port: int,
    resume_interrupted: bool,
    backup_every: str | None,
    backup_keep: int | None,
    backup_dir: Path | None,
    gateway_relay: bool,
) -> None:
    """Own the database and the one engine, and serve the HTTP API to every client.

    While it runs, every `promptlab` command on the same database goes through its
    typed routes (they find it by a file beside the database, readable by you only,
    holding the URL and the owner's admin token), so runs from several terminals share
    one engine and its rate budget. Others call it with a token of their own
    (`promptlab token create NAME --role viewer|editor|admin`); its OpenAPI
    description is at /openapi.json and Prometheus metrics at /metrics.

    Applications call its live gateway with the OpenAI or Anthropic SDK they use
    (`/v1/chat/completions`, `/v1/messages`, `model: experiment:NAME` or
    `prompt:NAME@label`) and a token of role gateway: each call is served its unit's
    variant and recorded once (docs/how-to/gateway.md). With --gateway-relay, stateless
    `promptlab gateway` processes serve them too, and keep serving while this restarts.
    """
    from promptlab.server.discovery import discovery_path
    from promptlab.server.run import Serving, is_loopback
    from promptlab.workbench import Workbench

    settings = with_backups(settings_from(ctx), backup_every, backup_keep, backup_dir)
    if gateway_relay:
        settings = replace(settings, gateway_relay=True)
    if not is_loopback(host):
        say(
            f"warning: listening on {host}, not loopback: anyone who can reach it and has "
            "the token can run requests with your keys; put TLS in front of it",
            logging.WARNING,
        )
    with Workbench.open(settings) as wb:
        wb.engine  # noqa: B018 - start it now: a bad providers file is a clear error first
        if resume_interrupted:
            resume_orphans(wb)
        serving = Serving(wb, host, port)
        say(
            f"serving {settings.db_path} at {serving.info.url} (token in "
            f"{discovery_path(settings.db_path)}); Ctrl-C stops"
        )
        serving.run()


def with_backups(
    settings: Settings, every: str | None, keep: int | None, folder: Path | None
) -> Settings:
    """The settings with serve's backup options over the environment's."""
    from promptlab.config import parse_period

    if every is not None:
        settings = replace(settings, backup_every_s=parse_period("--backup-every", every))
    if keep is not None:
        settings = replace(settings, backup_keep=keep)
    if folder is not None:
        settings = replace(settings, backup_dir=folder)
    return settings


def resume_orphans(wb: Workbench) -> None:
    """The recovery rule of a restarted owner: every run left unfinished by a process
    that is gone goes on here (a distributed run takes what its workers answered
    meanwhile from Redis). One that cannot is said in one line; the others go on."""
    for listed in wb.runs.list(1000):
        if not listed.run.process_gone:
            continue
        try:
            wb.runs.resume(listed.run.run_id)
        except PromptlabError as exc:
            say(f"could not resume {listed.run.run_id}: {exc}", logging.WARNING)
            continue
        say(f"resumed {listed.run.run_id} ({listed.run.name}): its owner was gone")


commands: list[click.Command] = [serve_command]
