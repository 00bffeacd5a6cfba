"""`promptlab plugins`: the plugins this process loads, and those it refused."""

from __future__ import annotations

import click

from promptlab.cli.common import handle_errors


@click.command("plugins")
@click.pass_context
@handle_errors
def plugins_command(ctx: click.Context) -> None:
    """List the loaded plugins (promptlab's own first) with their versions and hooks, then
    any refused, each with why. PROMPTLAB_PLUGINS=a,b loads only those; set and empty,
    none."""
    from promptlab.plugins.manager import plugins

    found = plugins()
    # What each registers is looked at, so a plugin taking a taken name shows refused.
    root = ctx.find_root()
    assert isinstance(root.command, click.Group)
    root.command.list_commands(root)
    found.scorer_kinds()
    found.exporters()
    found.output_checks()
    found.routes()
    click.echo(f"{'PLUGIN':<24} {'VERSION':<10} HOOKS")
    for info in found.loaded():
        hooks = ", ".join(info.hooks) or "-"
        click.echo(f"{info.name:<24} {info.version or '-':<10} {hooks}")
    for refusal in found.refused:
        click.echo(f"refused: {refusal.name}: {refusal.reason}")


commands = [plugins_command]
