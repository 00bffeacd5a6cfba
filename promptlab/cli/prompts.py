"""`promptlab init` and `promptlab prompt ...`: the prompt registry from the shell."""

from __future__ import annotations

import click

commands: list[click.Command] = []
