"""Docs that cannot drift: every CLI command has help text and a README mention."""

from __future__ import annotations

from pathlib import Path

import click
import pytest

from promptlab.cli import main

README = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")


def leaf_commands(group: click.Group, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found: list[tuple[str, ...]] = []
    for name, command in group.commands.items():
        path = (*prefix, name)
        if isinstance(command, click.Group):
            found += leaf_commands(command, path)
        else:
            found.append(path)
    return found


@pytest.mark.parametrize("path", leaf_commands(main), ids=" ".join)
def test_command_is_documented(path: tuple[str, ...]) -> None:
    assert f"promptlab {' '.join(path)}" in README, f"README does not mention {path}"


def test_readme_starts_with_the_two_commands() -> None:
    first_block = README.split("```bash", 1)[1].split("```", 1)[0]
    assert "make run" in first_block and "make test" in first_block
