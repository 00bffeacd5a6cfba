"""`promptlab fakellm`: serve the simulated model over HTTP (see promptlab.fakellm)."""

from __future__ import annotations

import click

commands: list[click.Command] = []
