"""A sample promptlab plugin: a provider of its own wire format (`kind: sample`,
provider.py, with a fake server for tests in fake_server.py), the `word_overlap` scorer,
the `no_email` output check, the `markdown` export format, `promptlab overlap` and its
API route.

`word_overlap` scores an output by the share of the expected answer's words it holds
(case ignored); with `min_share: 0.8` it is 1 from that share up and 0 below (a pass/fail
score). `markdown` writes a result table as a Markdown table (`promptlab export --format
markdown`, and the app's downloads). `promptlab overlap OUTPUT EXPECTED` prints the
score a spec would get, as `GET /v1/plugins/sample/overlap?output=...&expected=...`
answers it to any viewer of a `promptlab serve`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import click

from promptlab.checks.plugged import TextCheck
from promptlab.data.export import Exporter
from promptlab.errors import SpecError
from promptlab.evaluation.scorers import Scored, Scorer, ScorerKind
from promptlab.plugins.hookspecs import hookimpl
from promptlab.providers import ProviderKind
from promptlab.server.plugin_routes import PluginRoute

_WORDS = re.compile(r"\w+")
_EMAIL = re.compile(r"[\w.+-]+@([\w-]+(?:\.[\w-]+)+)")


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
def register_providers(register: Callable[[ProviderKind], None]) -> None:
    from promptlab_plugin_sample import provider  # aiohttp comes with promptlab

    register(ProviderKind(provider.KIND, provider.build))


@hookimpl
def register_scorers(register: Callable[[ScorerKind], None]) -> None:
    register(ScorerKind("word_overlap", _score, frozenset({"min_share"}), _check))


def _cell(value: Any) -> str:
    """A value as a Markdown table cell: its pipes escaped, on one line."""
    text = "" if value is None else str(value)
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\r", " ").replace("\n", " ")


def write_markdown(rows: Path, target: Path) -> None:
    """The rows (a Parquet file promptlab wrote) as one Markdown table at `target`."""
    import pyarrow.parquet as pq  # when a table is exported, not when the plugin loads

    table = pq.read_table(rows)
    names = table.column_names
    with target.open("w", encoding="utf-8") as out:
        out.write("| " + " | ".join(map(_cell, names)) + " |\n")
        out.write("|" + "---|" * len(names) + "\n")
        for batch in table.to_batches(max_chunksize=1_000):
            for row in batch.to_pylist():
                out.write("| " + " | ".join(_cell(row[n]) for n in names) + " |\n")


def no_email(text: str, _parsed: Any, options: Mapping[str, Any]) -> list[str]:
    """A problem when the output holds an email address (a domain in `allow` excepted);
    the problem says how many, never the address (it is stored with the result)."""
    allowed = {str(d).casefold() for d in options.get("allow", [])}
    found = [m for m in _EMAIL.finditer(text) if m.group(1).casefold() not in allowed]
    return [f"{len(found)} email address(es) in the output"] if found else []


@hookimpl
def register_output_checks(register: Callable[[TextCheck], None]) -> None:
    register(TextCheck("no_email", no_email, frozenset({"allow"})))


@hookimpl
def register_exporters(register: Callable[[Exporter], None]) -> None:
    register(Exporter("markdown", ".md", "text/markdown", "Markdown", write=write_markdown))


@hookimpl
def register_commands(cli: click.Group) -> None:
    @cli.command("overlap")
    @click.argument("output")
    @click.argument("expected")
    def overlap_command(output: str, expected: str) -> None:
        """Print the word_overlap score of OUTPUT against EXPECTED (the sample plugin's)."""
        click.echo(f"{overlap(output, expected):.2f}")


def overlap_route(output: str, expected: str) -> dict[str, float]:
    """The word_overlap share of `output` against `expected`."""
    return {"share": overlap(output, expected)}


@hookimpl
def register_routes(register: Callable[[PluginRoute], None]) -> None:
    register(PluginRoute("GET", "/overlap", "viewer", overlap_route))
