"""`promptlab status RUN_ID --items / --item KEY` on a real run over fakellm."""

from __future__ import annotations

from click.testing import CliRunner, Result

from promptlab.cli import main
from promptlab.cli.runs import ITEM_STATUSES
from promptlab.records import ItemStatus
from promptlab.workbench import Workbench
from tests.item_run_helpers import (
    BAD_ROW,
    ROWS,
)


def status(*args: str) -> Result:
    return CliRunner().invoke(main, ["status", *args])


def test_the_cli_knows_every_item_status() -> None:
    assert tuple(ItemStatus) == ITEM_STATUSES  # written out: `--help` loads no records


def test_items_lists_a_page_with_the_total(finished_run: str) -> None:
    result = status(finished_run, "--items", "--limit", "5")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == f"run {finished_run}: items 1-5 of {2 * ROWS}"
    assert lines[1].split()[:4] == ["key", "row", "variant", "repeat"]
    assert [line.split()[1:3] for line in lines[2:4]] == [["1", "briefed"], ["1", "plain"]]
    assert len(lines) == 2 + 5
    later = status(finished_run, "--items", "--offset", "38", "--limit", "5")
    assert later.stdout.splitlines()[0] == f"run {finished_run}: items 39-40 of {2 * ROWS}"


def test_items_filter_by_status_and_error_kind(finished_run: str) -> None:
    result = status(finished_run, "--items", "--status", "failed", "--error-kind", "invalid_input")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == (
        f"run {finished_run}: items 1-2 of 2 (status=failed, error kind=invalid_input)"
    )
    assert all(line.split()[1] == str(BAD_ROW + 1) for line in lines[2:])
    none = status(finished_run, "--items", "--variant", "nope")
    assert none.stdout.strip() == f"run {finished_run}: no items (variant=nope)"
    bad = status(finished_run, "--items", "--status", "done")
    assert bad.exit_code == 2 and "'done' is not one of" in bad.output


def test_item_prints_inputs_messages_output_and_attempts(finished_run: str) -> None:
    with Workbench.open() as wb:
        row = next(r for r in wb.runs.items(finished_run).rows if r.attempts > 1)
        view = wb.runs.item(finished_run, row.key)
    result = status(finished_run, "--item", row.key[:12])
    assert result.exit_code == 0, result.output
    out = result.stdout
    lines = out.splitlines()
    assert lines[0] == f"item {row.key} of run {finished_run}: {view.status}"
    assert f"  dataset row {row.row_index + 1}, variant {row.variant} " in out
    assert f"  text: ticket alpha-{row.row_index:02d}" in lines
    messages = lines[lines.index("messages:") + 1 :]
    for message in view.messages or ():
        assert f"  [{message['role']}]" in messages
        assert f"    {message['content']}" in messages
    assert f'"max_tokens": {view.params["max_tokens"]}' in out
    header = lines.index(f"attempts: {len(view.attempts)}") + 1
    assert lines[header].split()[:5] == ["#", "started", "outcome", "kind", "http"]
    attempt_lines = lines[header + 1 : header + 1 + len(view.attempts)]
    assert [line.split()[0] for line in attempt_lines] == [
        str(n) for n in range(1, len(view.attempts) + 1)
    ]
    assert all("500" in line and "server" in line for line in attempt_lines[:-1])
    assert all("backoff" in line for line in attempt_lines[1:])
    if view.status == "succeeded":
        assert "output:" in lines and any(line.startswith("usage: tokens in ") for line in lines)


def test_item_of_an_invalid_row_prints_the_render_error(finished_run: str) -> None:
    with Workbench.open() as wb:
        key = wb.runs.items(finished_run, error_kind="invalid_input").rows[0].key
    result = status(finished_run, "--item", key)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    at = lines.index("render error (the item was not sent):")
    assert "'text' is a required property" in lines[at + 1]
    assert "messages:" not in lines and "attempts: 0" in lines
    assert any(line.startswith("error: invalid_input: ") for line in lines)


def test_item_errors_are_one_line(finished_run: str) -> None:
    unknown = status(finished_run, "--item", "0" * 32)
    assert unknown.exit_code == 1
    assert unknown.stderr == f"error: run {finished_run} has no item '{'0' * 32}'\n"
    short = status(finished_run, "--item", "abc")
    assert short.exit_code == 1 and "at least 8 of its hex digits" in short.stderr
    no_run = status("--items")
    assert no_run.exit_code == 2 and "--items and --item need a RUN_ID" in no_run.output
