"""`promptlab run / resume / status / cancel`: batch runs through the shared engine."""

from __future__ import annotations

import click

commands: list[click.Command] = []
