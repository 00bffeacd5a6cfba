"""`promptlab backup` and `restore`: a consistent copy of a live database, and a copy put
back in place (promptlab/store/backup.py)."""

from __future__ import annotations

from pathlib import Path

import click

from promptlab.cli.common import db_option, handle_errors, open_workbench, served, settings_from


@click.command("backup")
@db_option
@click.argument("dest", type=click.Path(dir_okay=False, path_type=Path))
@click.pass_context
@handle_errors
def backup_command(ctx: click.Context, dest: Path) -> None:
    """Copy the database, as it stands, to a new file DEST, while it is in use: through
    the server that owns it (an admin's token), else directly. Runs go on meanwhile;
    the copy holds every answer counted when it began."""
    from promptlab.atomicfile import check_target

    check_target(dest)  # a new file in an existing folder, refused before any work
    server = served(ctx)
    if server is not None:  # the owner copies; the copy is written here
        from promptlab.server.client import ServerClient

        size = ServerClient(server, timeout_s=None).job_file("/v1/jobs/backups", {}, dest)
    else:
        with open_workbench(ctx) as wb:
            size = wb.backup(dest)
    click.echo(f"backed up {settings_from(ctx).db_path} to {dest} ({size:,} bytes)")


@click.command("restore")
@db_option
@click.argument("source", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.pass_context
@handle_errors
def restore_command(ctx: click.Context, source: Path) -> None:
    """Put the backup SOURCE in place as the database. Refused while a process (a
    server, the app) holds the database; the database it replaces is kept beside it."""
    from promptlab.workbench import restore

    target = settings_from(ctx).db_path
    aside = restore(source, target)
    kept = f"; the database it replaced is {aside}" if aside is not None else ""
    click.echo(f"restored {source} to {target}{kept}")


commands: list[click.Command] = [backup_command, restore_command]
