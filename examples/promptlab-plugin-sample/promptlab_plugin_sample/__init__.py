"""A sample promptlab plugin: the `word_overlap` scorer and `promptlab overlap`.

`word_overlap` scores an output by the share of the expected answer's words it holds
(case ignored); with `min_share: 0.8` it is 1 from that share up and 0 below (a pass/fail
score). `promptlab overlap OUTPUT EXPECTED` prints the score a spec would get.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

import click

from promptlab.errors import SpecError
from promptlab.evaluation.scorers import Scored, Scorer, ScorerKind
from promptlab.plugins.hookspecs import hookimpl

_WORDS = re.compile(r"\w+")


def overlap(output: str, expected: str) -> float:
    """The share of `expected`'s distinct words that `output` holds (1 when it has none)."""
    want = set(_WORDS.findall(expected.casefold()))
    if not want:
        return 1.0
    return len(want & set(_WORDS.findall(output.casefold()))) / len(want)


def _score(scorer: Scorer, output: str, expected: Any, _row: Mapping[str, Any]) -> Scored:
    share = overlap(output, str(expected))
    floor = scorer.options.get("min_share")
    return share if floor is None else share >= floor


def _check(options: dict[str, Any], where: str) -> None:
    floor = options.get("min_share")
    if floor is not None and (
        isinstance(floor, bool) or not isinstance(floor, int | float) or not 0 < floor <= 1
    ):
        raise SpecError(f"{where}.min_share: a share above 0 and at most 1, got {floor!r}")


@hookimpl
def register_scorers(register: Callable[[ScorerKind], None]) -> None:
    register(ScorerKind("word_overlap", _score, frozenset({"min_share"}), _check))


@hookimpl
def register_commands(cli: click.Group) -> None:
    @cli.command("overlap")
    @click.argument("output")
    @click.argument("expected")
    def overlap_command(output: str, expected: str) -> None:
        """Print the word_overlap score of OUTPUT against EXPECTED (the sample plugin's)."""
        click.echo(f"{overlap(output, expected):.2f}")
