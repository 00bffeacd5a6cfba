"""`promptlab serve`: own the database and the engine; serve the API (promptlab/server)."""

from __future__ import annotations

import click

from promptlab.cli.common import db_option, handle_errors, settings_from


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
    from promptlab.server.discovery import discovery_path
    from promptlab.server.run import Serving, is_loopback
    from promptlab.workbench import Workbench

    settings = settings_from(ctx)
    if not is_loopback(host):
        click.echo(
            f"warning: listening on {host}, not loopback: anyone who can reach it and has "
            "the token can run requests with your keys; put TLS in front of it",
            err=True,
        )
    with Workbench.open(settings) as wb:
        wb.engine  # noqa: B018 - start it now: a bad providers file is a clear error first
        serving = Serving(wb, host, port)
        click.echo(
            f"serving {settings.db_path} at {serving.info.url} (token in "
            f"{discovery_path(settings.db_path)}); Ctrl-C stops",
            err=True,
        )
        serving.run()


commands: list[click.Command] = [serve_command]
