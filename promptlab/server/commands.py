"""What `POST /v1/cli` refuses before a command line runs inside the server.

The command is the one click resolves, not the first word: `--db X serve` names
`serve`. A command sent to a server runs on the server's database, so `--db` is refused
anywhere in the line (promptlab's client leaves it out).
"""

from __future__ import annotations

from collections.abc import Sequence

import click

from promptlab.server.answers import Refused

#: Commands that would start a second server, or never return, inside the first.
NOT_SERVED = frozenset({"serve", "fakellm", "worker"})


def refuse_unserved(group: click.Group, argv: Sequence[str]) -> None:
    """Refused (422) unless `argv` is a command that may run inside the server."""
    if any(arg == "--db" or arg.startswith("--db=") for arg in argv):
        raise Refused(422, "--db: a command sent to a server runs on the server's database")
    with group.make_context("promptlab", list(argv), resilient_parsing=True) as ctx:
        # Click 8 keeps the command's name apart (protected args); Click 9 in `args`.
        rest = [*getattr(ctx, "_protected_args", []), *ctx.args]
    name = rest[0] if rest else None
    if name in NOT_SERVED:
        raise Refused(422, f"`promptlab {name}` does not run inside a server")
