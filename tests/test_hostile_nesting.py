"""Deeply nested JSON is refused with one line naming the file and line, never a
RecursionError: every JSON reader (CLI and the Datasets page) holds at MAX_JSON_DEPTH."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from promptlab.checks.validation import Checker, CheckStatus
from promptlab.config import DEMO_DIR
from promptlab.errors import SpecError
from promptlab.ui.resources import get_workbench
from tests.apptest_helpers import shown
from tests.test_hostile_readers import REQUEST, cli, refused, write

PAGE = str(Path(__file__).resolve().parent.parent / "pages" / "datasets.py")
DEEP = 20_000  # far past Python's recursion limit
MAX_JSON_DEPTH = 100  # the documented limit (README, Limits)
TOO_DEEP = f"nested more than {MAX_JSON_DEPTH} levels deep"


def nested(levels: int, key: str = "a") -> str:
    """A JSON object `levels` deep in all: the object, then arrays inside it."""
    return f'{{"{key}": ' + "[" * (levels - 1) + "]" * (levels - 1) + "}"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("levels", [MAX_JSON_DEPTH + 1, 128, DEEP])
def test_dataset_import_refuses_deep_lines(tmp_path: Path, levels: int) -> None:
    # 101-128 levels pass DuckDB's reader (its limit is 128): the limit is ours.
    path = write(tmp_path / "deep.jsonl", '{"a": [1]}', nested(levels))
    refused(
        cli("dataset", "import", str(path), "--name", "deep"), f"deep.jsonl, line 2: {TOO_DEEP}"
    )
    assert "deep" not in cli("dataset", "list").output


def test_dataset_import_takes_the_deepest_allowed(tmp_path: Path) -> None:
    path = write(tmp_path / "ok.jsonl", nested(MAX_JSON_DEPTH))
    imported = cli("dataset", "import", str(path), "--name", "ok")
    assert imported.exit_code == 0, imported.output
    assert json.dumps(json.loads(nested(MAX_JSON_DEPTH))) in cli("dataset", "show", "ok").output


@pytest.mark.timeout(60)
def test_the_datasets_page_names_the_line_of_a_deep_upload(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROMPTLAB_DEMO", "0")
    at = AppTest.from_file(PAGE, default_timeout=30).run()
    content = ('{"a": 1}\n' + nested(DEEP) + "\n").encode()
    at.file_uploader(key="dataset_upload").upload("deep.jsonl", content, "application/json")
    at.run()
    at.text_input(key="dataset_name").input("deep")
    at.button(key="dataset_import").click().run()
    assert not at.exception, at.exception
    assert [shown(e.value) for e in at.error] == [f"deep.jsonl, line 2: {TOO_DEEP}"]
    assert get_workbench().datasets.list() == []


@pytest.mark.timeout(60)
@pytest.mark.parametrize("command", ["feedback", "logs"])
def test_feedback_and_log_imports_refuse_deep_lines(tmp_path: Path, command: str) -> None:
    row = {"version": "x@1.0.0", "unit_id": "u", "kind": "click"}
    path = write(tmp_path / "fb.jsonl", json.dumps(row), json.dumps(row)[:-1] + ', "x": 1}')
    path.write_text(path.read_text() + nested(DEEP, key="deep") + "\n")
    refused(cli(command, "import", str(path)), f"fb.jsonl, line 3: {TOO_DEEP}")


@pytest.mark.timeout(60)
def test_batch_refuses_a_deep_line_before_a_run_exists(tmp_path: Path) -> None:
    deep = json.dumps(REQUEST)[:-1] + ', "meta": ' + "[" * DEEP + "]" * DEEP + "}"
    path = write(tmp_path / "requests.jsonl", json.dumps(REQUEST), deep)
    result = cli("batch", str(path), "--endpoint", "sim", "--model", "fast")
    refused(result, f"dataset {path}, line 2: {TOO_DEEP}", code=2)
    assert "no runs" in cli("status").output.lower()


@pytest.mark.timeout(60)
def test_exposures_import_refuses_a_deep_line(tmp_path: Path) -> None:
    path = write(tmp_path / "exposures.jsonl", nested(DEEP, key="experiment"))
    refused(cli("exposures", "import", str(path)), f"exposures {path}, line 1: {TOO_DEEP}")


@pytest.mark.timeout(60)
def test_validate_refuses_a_deep_line(tmp_path: Path) -> None:
    schema = tmp_path / "schema.json"
    schema.write_text('{"type": "object"}', encoding="utf-8")
    path = write(tmp_path / "outputs.jsonl", '"fine"', "[" * DEEP + "]" * DEEP)
    result = cli("validate", "--schema", str(schema), str(path))
    refused(result, f"outputs {path}, line 2: {TOO_DEEP}")


@pytest.mark.timeout(60)
def test_a_deep_vars_file_is_refused(tmp_path: Path) -> None:
    assert cli("prompt", "add", str(DEMO_DIR / "ticket-triage.yaml")).exit_code == 0
    path = tmp_path / "vars.json"
    path.write_text('{\n  "ticket": "hi",\n  "x": ' + "[" * DEEP + "]" * DEEP + "\n}\n")
    result = cli("prompt", "render", "ticket-triage", "--vars-file", str(path))
    refused(result, f"{path}, line 3: {TOO_DEEP}")


@pytest.mark.timeout(60)
def test_a_run_spec_dataset_refuses_a_deep_line(tmp_path: Path) -> None:
    from promptlab.engine.plan.rows import check_dataset

    path = write(tmp_path / "rows.jsonl", '{"a": 1}', nested(DEEP))
    with pytest.raises(SpecError, match=rf"^dataset {path}, line 2: {TOO_DEEP}$"):
        check_dataset(path)


@pytest.mark.parametrize(
    "text",
    [
        '"[[[[[[[[[[ not nesting ]"',  # brackets inside a string are text
        '{"a": "\\"[[["}',  # an escaped quote does not end the string
        "[" + '"\\\\",' * 200 + "1]",  # an escaped backslash does
        "[" + "[1]," * 500 + "1]",  # wide, not deep
    ],
)
def test_brackets_that_do_not_nest_are_not_counted(text: str) -> None:
    from promptlab.data.jsonl import strict_loads

    assert strict_loads(text) == json.loads(text)


def test_the_depth_limit_counts_objects_and_arrays() -> None:
    from promptlab.data.jsonl import NotJsonError, strict_loads

    deepest = '{"a":' * 50 + "[" * 50 + "]" * 50 + "}" * 50
    assert strict_loads(deepest)
    with pytest.raises(NotJsonError, match=TOO_DEEP):
        strict_loads("[" + deepest + "]")


@pytest.mark.timeout(60)
def test_a_deep_value_typed_on_the_command_line_is_a_wrong_value(tmp_path: Path) -> None:
    assert cli("prompt", "add", str(DEMO_DIR / "product-description.yaml")).exit_code == 0
    deep = "[" * DEEP + "]" * DEEP
    result = cli(
        "prompt",
        "render",
        "product-description",
        "--var",
        f"features={deep}",
        "--var",
        "product_name=x",
    )
    assert isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == 1 and "features" in result.stderr
    assert len(result.stderr.splitlines()) == 1


@pytest.mark.timeout(60)
def test_a_deep_csv_cell_is_a_bad_row_when_checked(tmp_path: Path) -> None:
    assert cli("prompt", "add", str(DEMO_DIR / "product-description.yaml")).exit_code == 0
    path = write(
        tmp_path / "p.csv",
        "product_name,features",
        'x,"[""a""]"',
        'y,"' + "[" * DEEP + "]" * DEEP + '"',
    )
    assert cli("dataset", "import", str(path), "--name", "p").exit_code == 0
    checked = cli("dataset", "check", "p", "product-description")
    assert isinstance(checked.exception, SystemExit), checked.exception
    assert checked.exit_code == 1 and "1 of 2 rows" in checked.output + checked.stderr


@pytest.mark.parametrize(
    "output",
    [
        "[" * DEEP,  # unclosed: no JSON, and json.loads recursed past the limit on it
        "prose " + "[" * DEEP + "]" * DEEP,
        "```json\n" + '{"a": ' * DEEP + "1" + "}" * DEEP + "\n```",
    ],
)
def test_a_deeply_nested_model_output_is_invalid_not_a_crash(output: str) -> None:
    check = Checker({"type": "object"}).check(output)
    assert check.status is CheckStatus.INVALID
