"""`promptlab token create|list|revoke`: who may call a shared server, and as what.

With a server owning the database these call its `/v1/tokens` routes (an admin's token:
the discovery file's is one); without, they change the database directly. Either way
the answer is the same data, printed by the same lines.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import click

from promptlab.cli.common import db_option, handle_errors, open_workbench, served
from promptlab.errors import ConfigError

#: The facade's TOKEN_ROLES, written out: the CLI does not import the facades at start.
ROLE_CHOICES = ("viewer", "editor", "admin", "gateway")


@click.group("token")
def token() -> None:
    """API tokens for `promptlab serve` (or the app's API): one per person or service.

    A viewer reads; an editor also runs, edits prompts and datasets and reviews; an
    admin also manages tokens and an experiment's ramp and kill switch. A gateway token
    is an application's: it may call the live gateway (/v1/chat/completions,
    /v1/messages) and send feedback events, nothing else. A token is shown once, when it
    is created; only its hash is kept.
    """


@token.command("create")
@db_option
@click.argument("name")
@click.option(
    "--role", type=click.Choice(ROLE_CHOICES), required=True, help="What the token may do."
)
@click.option(
    "--service",
    is_flag=True,
    help="A service (a job, a bot): it may act on behalf of the person a request "
    "names, recorded as `NAME on behalf of PERSON`.",
)
@click.pass_context
@handle_errors(usage=(ConfigError,))
def create(ctx: click.Context, name: str, role: str, service: bool) -> None:
    """Make a token for NAME; it is printed once, here, and never again."""
    body = {"name": name, "role": role, "service": service}

    def direct(wb: Any) -> dict[str, Any]:
        record, secret = wb.tokens.create(name, role, service=service)
        return {**record.as_dict(), "token": secret}

    made = _call(ctx, lambda c: c.post("/v1/tokens", body, idempotent=True), direct)
    click.echo(f"{made['token_id']}  {made['name']} ({_kind(made)})")
    click.echo(made["token"])
    click.echo("  shown once: give it to its holder, who sets PROMPTLAB_TOKEN", err=True)


@token.command("list")
@db_option
@click.pass_context
@handle_errors
def list_tokens(ctx: click.Context) -> None:
    """Every token: id, name, role, who made it and when, and whether it is revoked."""

    def direct(wb: Any) -> list[dict[str, Any]]:
        return [record.as_dict() for record in wb.tokens.list()]

    listed = _call(ctx, lambda c: c.get("/v1/tokens"), direct)
    for line in token_lines(listed):
        click.echo(line)


@token.command("revoke")
@db_option
@click.argument("token_id")
@click.pass_context
@handle_errors
def revoke(ctx: click.Context, token_id: str) -> None:
    """Revoke a token (by its id, `tok_...`): it stops working at once."""

    def direct(wb: Any) -> dict[str, Any]:
        return wb.tokens.revoke(token_id).as_dict()

    revoked = _call(ctx, lambda c: c.post(f"/v1/tokens/{token_id}/revoke"), direct)
    click.echo(f"revoked {revoked['token_id']} ({revoked['name']})")


def token_lines(tokens: list[dict[str, Any]]) -> Iterator[str]:
    if not tokens:
        yield "no tokens (promptlab token create NAME --role viewer|editor|admin)"
    for t in tokens:
        revoked = f"revoked by {t['revoked_by']} {_when(t['revoked_at'])}"
        state = "active" if t["active"] else revoked
        yield (
            f"{t['token_id']}  {t['name']:<20} {_kind(t):<16} made by {t['created_by']} "
            f"{_when(t['created_at'])}  {state}"
        )


def _when(at: Any) -> str:
    """A time to the second, the same whether it came as a datetime or as JSON text."""
    return str(at)[:19].replace("T", " ")


def _kind(t: dict[str, Any]) -> str:
    return f"{t['role']}{', service' if t['service'] else ''}"


def _call(ctx: click.Context, remote: Callable[[Any], Any], direct: Callable[[Any], Any]) -> Any:
    """`remote(client)` on the server that owns the database, else `direct(workbench)`."""
    server = served(ctx)
    if server is not None:
        from promptlab.server.client import ServerClient

        return remote(ServerClient(server))
    with open_workbench(ctx) as wb:
        return direct(wb)


commands: list[click.Command] = [token]
