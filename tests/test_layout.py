"""The seams hold: SQL only in promptlab/store, pages and CLI only through the facade."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: Statements that read or write tables; written as SQL text only inside the store.
SQL = re.compile(r"\b(SELECT .+ FROM|INSERT INTO|UPDATE \w+ SET|DELETE FROM|CREATE TABLE)\b")
#: What a page may import from promptlab: the facade and the Streamlit widgets.
PAGE_IMPORTS = ("promptlab.workbench", "promptlab.ui")
#: What the CLI may not import: the store and the engine's internals.
CLI_FORBIDDEN = ("promptlab.store", "promptlab.engine.", "promptlab.prompts.registry")


def promptlab_imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.append(node.module)
        elif isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
    return [n for n in names if n.startswith("promptlab")]


@pytest.mark.parametrize(
    "path",
    [p for p in sorted((ROOT / "promptlab").rglob("*.py")) if "store" not in p.parts],
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_no_sql_outside_the_store(path: Path) -> None:
    assert not SQL.search(path.read_text(encoding="utf-8"))


@pytest.mark.parametrize("path", sorted((ROOT / "pages").glob("*.py")), ids=lambda p: p.name)
def test_pages_import_only_the_facade_and_ui(path: Path) -> None:
    for name in promptlab_imports(path):
        assert name.startswith(PAGE_IMPORTS), f"{path.name} imports {name}"


@pytest.mark.parametrize(
    "path", sorted((ROOT / "promptlab" / "cli").glob("*.py")), ids=lambda p: p.name
)
def test_the_cli_does_not_reach_into_store_or_engine(path: Path) -> None:
    for name in promptlab_imports(path):
        assert not name.startswith(CLI_FORBIDDEN), f"cli/{path.name} imports {name}"
