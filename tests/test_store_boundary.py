"""The store boundary: DuckDB's errors leave `promptlab.store` only as promptlab errors,
the file checks datasets and feedback share are one public module, and every exception
class promptlab raises is in the tree drawn in `promptlab/errors.py`."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path
from typing import Any

import duckdb
import pytest

import promptlab.errors
from promptlab.data import readers
from promptlab.data.datasets import DatasetStore
from promptlab.data.feedback import FeedbackImporter
from promptlab.errors import (
    DatasetError,
    FeedbackError,
    FileReadError,
    PromptlabError,
    StoreError,
)
from promptlab.prompts.registry import Registry
from promptlab.store import Store
from promptlab.store.datasets import DatasetTables
from promptlab.store.files import FileReads, file_source

ROOT = Path(__file__).resolve().parent.parent
LIBRARY = ROOT / "promptlab"


def write(folder: Path, name: str, content: bytes | str) -> Path:
    path = folder / name
    path.write_bytes(content.encode("utf-8") if isinstance(content, str) else content)
    return path


def truncated_parquet(folder: Path, name: str) -> Path:
    """A real Parquet file cut in the middle: its footer is gone."""
    whole = folder / "whole.parquet"
    with duckdb.connect() as con:
        con.execute(
            f"COPY (SELECT range AS id, 'text ' || range AS ticket FROM range(5000)) "
            f"TO '{whole}' (FORMAT parquet)"
        )
    data = whole.read_bytes()
    return write(folder, name, data[: len(data) // 2])


# ---- DuckDB's refusals arrive as promptlab errors ---------------------------------------


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("text.parquet", b"this is not parquet at all", "text.parquet: not a Parquet file"),
        ("few.csv", "a,b\n1,2\n3\n", "few.csv, line 3: expected 2 fields, found 1"),
        ("odd[1].csv", "a,b\n1,2\n3,4,5\n", "odd[1].csv, line 3: expected 2 fields, found 3"),
        ("bad.jsonl", '{"a": 1}\n{"a": \n', "bad.jsonl, line 2: not valid JSON"),
    ],
)
def test_a_file_duckdb_refuses_is_a_dataset_error_naming_the_file(
    store: Store, tmp_path: Path, name: str, content: bytes | str, message: str
) -> None:
    path = write(tmp_path, name, content)
    with pytest.raises(DatasetError) as caught:
        DatasetStore(store).import_file(path, "tickets", author="t")
    assert str(caught.value).startswith(message)
    assert "\n" not in str(caught.value)
    # The store said it first, as its own error; DuckDB's exception is only the cause.
    refused = caught.value.__cause__
    assert isinstance(refused, FileReadError) and isinstance(refused, StoreError)
    assert isinstance(refused.__cause__, duckdb.Error)
    assert DatasetTables(store).names() == []


def test_a_truncated_parquet_file_is_a_dataset_error_naming_the_file(
    store: Store, tmp_path: Path
) -> None:
    path = truncated_parquet(tmp_path, "cut.parquet")
    with pytest.raises(DatasetError, match=r"^cut\.parquet: ") as caught:
        DatasetStore(store).import_file(path, "cut", author="t")
    assert str(tmp_path) not in str(caught.value)  # the file's name, not DuckDB's path


def test_a_file_duckdb_refuses_is_a_feedback_error_naming_the_file(
    store: Store, tmp_path: Path
) -> None:
    importer = FeedbackImporter(store, Registry(store))
    with pytest.raises(FeedbackError, match=r"^short\.csv, line 2: expected 2 fields, found 1$"):
        importer.import_feedback(write(tmp_path, "short.csv", "result_id,kind\nabc\n"))
    with pytest.raises(FeedbackError, match=r"^text\.parquet: not a Parquet file$"):
        importer.import_logs(write(tmp_path, "text.parquet", b"not parquet"))
    with pytest.raises(FeedbackError, match=r"^cut\.parquet: "):
        importer.import_logs(truncated_parquet(tmp_path, "cut.parquet"))


def test_the_store_raises_file_read_error_not_duckdbs_own(store: Store, tmp_path: Path) -> None:
    path = write(tmp_path, "text.parquet", b"this is not parquet at all")
    reads = FileReads(store)
    with file_source("parquet", path, max_rows=10) as source:
        for read in (reads.describe, reads.parquet_fields, reads.stated_rows):
            with pytest.raises(FileReadError, match=r"^text\.parquet: not a Parquet file$"):
                read(source)
    broken = write(tmp_path, "few.csv", "a,b\n1,2\n3\n")
    with (
        file_source("csv", broken, ("a", "b")) as source,
        pytest.raises(FileReadError, match=r"^few\.csv, line 3: expected 2 fields"),
        DatasetTables(store).importing() as writes,
    ):
        writes.insert_rows("few", source, ["a", "b"])
    lines = write(tmp_path, "bad.jsonl", '{"a": 1}\n' + "x" * 5_000_000 + "\n")
    with (
        file_source("jsonl", lines) as source,
        pytest.raises(FileReadError, match=r"^bad\.jsonl: "),
    ):
        list(reads.json_lines_matching(source, "nan", 64))


def test_file_read_error_is_in_the_tree() -> None:
    assert issubclass(FileReadError, StoreError) and issubclass(FileReadError, PromptlabError)


# ---- the readers module ------------------------------------------------------------------


def imported_from(module: Path, source: str) -> set[str]:
    """The names `module` imports from the module `source`."""
    tree = ast.parse(module.read_text(encoding="utf-8"))
    return {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == source
        for alias in node.names
    }


def test_readers_public_functions_are_shared_by_datasets_and_feedback() -> None:
    datasets = imported_from(LIBRARY / "data" / "datasets.py", "promptlab.data.readers")
    feedback = imported_from(LIBRARY / "data" / "feedback.py", "promptlab.data.readers")
    assert readers.__all__ == sorted(readers.__all__)
    assert all(hasattr(readers, name) for name in readers.__all__)
    assert not any(name.startswith("_") for name in datasets | feedback)
    shared = {"check_jsonl_keys", "check_row_count", "describe_file", "format_of"}
    shared |= {"line_of_row", "precheck", "reading"}
    assert shared <= datasets & feedback
    # Every public function of the module serves someone: the two importers, or itself.
    text = (LIBRARY / "data" / "readers.py").read_text(encoding="utf-8")
    for name in readers.__all__:
        if callable(getattr(readers, name)):
            used_inside = len(re.findall(rf"\b{name}\(", text)) > 1  # more than its def
            assert name in datasets | feedback or used_inside, name


def test_data_modules_import_no_private_names_of_other_modules() -> None:
    for module in (LIBRARY / "data").glob("*.py"):
        tree = ast.parse(module.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("promptlab"):
                private = [a.name for a in node.names if a.name.startswith("_")]
                assert not private, f"{module.name} imports {private} from {node.module}"


# ---- the exception tree ------------------------------------------------------------------


@functools.cache
def error_classes() -> dict[str, str]:
    """Every class in the library that derives from PromptlabError, with its module."""
    bases: dict[str, tuple[str, list[str]]] = {}
    for path in LIBRARY.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                names = [
                    b.attr if isinstance(b, ast.Attribute) else getattr(b, "id", "")
                    for b in node.bases
                ]
                bases[node.name] = (str(path.relative_to(ROOT)), names)
    found = {"PromptlabError": "promptlab/errors.py"}
    grew = True
    while grew:
        grew = False
        for name, (where, parents) in bases.items():
            if name not in found and any(p in found for p in parents):
                found[name] = where
                grew = True
    return found


def test_every_promptlab_error_is_drawn_in_the_tree() -> None:
    drawing = promptlab.errors.__doc__ or ""
    drawn = set(re.findall(r"(?:├──|└──) (\w+)", drawing))
    drawn |= set(re.findall(r"^ {4}(PromptlabError)$", drawing, re.MULTILINE))
    classes = error_classes()
    assert set(classes) <= drawn, sorted(set(classes) - drawn)
    assert drawn <= set(classes), sorted(drawn - set(classes))


def test_item_key_error_lives_in_the_tree() -> None:
    from promptlab.errors import ItemKeyError
    from promptlab.views.item import ItemKeyError as from_view

    assert from_view is ItemKeyError and issubclass(ItemKeyError, PromptlabError)
    assert error_classes()["ItemKeyError"] == "promptlab/errors.py"


def test_a_duckdb_error_in_any_read_or_write_leaves_the_store_as_a_store_error(
    store: Store,
) -> None:
    with pytest.raises(StoreError, match="no_such_table") as read, store.read() as cur:
        cur.execute("SELECT * FROM no_such_table")
    assert isinstance(read.value.__cause__, duckdb.Error)
    with pytest.raises(StoreError, match="duplicate key") as write, store.transaction() as tx:
        tx.execute("INSERT INTO _migrations VALUES ('twice', now())")
        tx.execute("INSERT INTO _migrations VALUES ('twice', now())")
    assert isinstance(write.value.__cause__, duckdb.ConstraintException)
    with store.read() as cur:  # the failed transaction was rolled back whole
        assert cur.execute("SELECT count(*) FROM _migrations WHERE name = 'twice'").fetchone() == (
            0,
        )


class FailingRegistry:
    """A registry whose database fails on every read."""

    def resolve(self, ref: str) -> Any:
        raise StoreError(f"IO Error: could not read {ref}")


def test_a_database_failure_while_resolving_a_prompt_is_not_called_a_bad_spec(
    store: Store, tmp_path: Path
) -> None:
    from promptlab.engine import Engine, parse_spec
    from promptlab.errors import SpecError

    dataset = write(tmp_path, "d.csv", "text\nhello\n")
    spec = parse_spec(
        {"dataset": str(dataset), "variants": [{"prompt": "greet@production", "model": "sim:fast"}]}
    )
    with (
        Engine(store, registry=FailingRegistry()) as engine,
        pytest.raises(StoreError, match="could not read greet@production") as raised,
    ):
        engine.estimate(spec)
    assert not isinstance(raised.value, SpecError)
