"""The seams and the shape hold: SQL and DuckDB only in promptlab/store, Streamlit only in
the UI, pages and CLI only through the facade, small modules and functions, one-line
package docstrings, and the docs' map of the tree (docs/explanation/architecture.md)."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: Statements that read or write tables; written as SQL text only inside the store.
SQL = re.compile(r"\b(SELECT .+ FROM|INSERT INTO|UPDATE \w+ SET|DELETE FROM|CREATE TABLE)\b")
#: What a page may import from promptlab: the workbench and its facades, the Streamlit
#: widgets, the rows and figures of views/, and pure types (records, errors, templates,
#: prompt-file YAML, experiment configs, check statuses); never the store or the engine.
PAGE_IMPORTS = (
    "promptlab.workbench",
    "promptlab.facades",
    "promptlab.ui",
    "promptlab.views",
    "promptlab.records",
    "promptlab.errors",
    "promptlab.prompts.templates",
    "promptlab.prompts.files",
    "promptlab.experiments",
    "promptlab.checks.validation",
)
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
def test_pages_import_only_facades_views_and_pure_types(path: Path) -> None:
    for name in promptlab_imports(path):
        assert name.startswith(PAGE_IMPORTS), f"{path.name} imports {name}"


@pytest.mark.parametrize(
    "path", sorted((ROOT / "promptlab" / "cli").glob("*.py")), ids=lambda p: p.name
)
def test_the_cli_does_not_reach_into_store_or_engine(path: Path) -> None:
    for name in promptlab_imports(path):
        assert not name.startswith(CLI_FORBIDDEN), f"cli/{path.name} imports {name}"


@pytest.mark.parametrize(
    "path", sorted((ROOT / "promptlab" / "server").glob("*.py")), ids=lambda p: p.name
)
def test_the_server_never_imports_the_cli(path: Path) -> None:
    """The server answers typed routes; the CLI is one of its clients (issue 37: a
    server that ran the CLI's command lines was a remote shell)."""
    for name in promptlab_imports(path):
        assert not (name == "promptlab.cli" or name.startswith("promptlab.cli.")), (
            f"server/{path.name} imports {name}"
        )


def absolute_imports(path: Path) -> list[str]:
    """Every module a file imports (at its top, under TYPE_CHECKING or inside a function),
    relative imports resolved against the file's package."""
    package = path.relative_to(ROOT).parent.parts
    names = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else ()
            module = ".".join([*base, *([node.module] if node.module else [])])
            # `from . import stats` names modules, not just their package.
            names.extend([module] if node.module else [f"{module}.{a.name}" for a in node.names])
    return names


@pytest.mark.parametrize(
    "path", sorted((ROOT / "promptlab" / "records").rglob("*.py")), ids=lambda p: p.name
)
def test_the_records_never_import_the_analysis(path: Path) -> None:
    """Records are the low layer of shared types: statistics on them (intervals) live in
    promptlab/analysis/, which imports the records, never the other way (issue 39)."""
    for name in absolute_imports(path):
        assert not (name == "promptlab.analysis" or name.startswith("promptlab.analysis.")), (
            f"records/{path.name} imports {name}"
        )


def runtime_imports(path: Path) -> list[str]:
    """Every module a file imports when it runs: at its top or inside a function, but not
    under `if TYPE_CHECKING:` (type names only; its `else:` runs and counts)."""
    package = path.relative_to(ROOT).parent.parts
    names: list[str] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):  # a relative one resolved from the package
            base = package[: len(package) - node.level + 1] if node.level else ()
            module = ".".join([*base, *([node.module] if node.module else [])])
            # `from promptlab import engine` imports the engine too.
            names.extend([module, *(f"{module}.{alias.name}" for alias in node.names)])
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    return names


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


@pytest.mark.parametrize(
    "path", sorted((ROOT / "promptlab" / "evaluation").rglob("*.py")), ids=lambda p: p.name
)
def test_evaluation_never_imports_the_engine_at_run_time(path: Path) -> None:
    """The engine calls evaluation's after-run work through its run-ended hook and submits
    the runs that work asks for (issue 39): evaluation imports the engine for type names
    only, so the engine may import evaluation's parsers (scorers, cross-checks)."""
    for name in runtime_imports(path):
        assert not (name == "promptlab.engine" or name.startswith("promptlab.engine.")), (
            f"evaluation/{path.name} imports {name}"
        )


@pytest.mark.parametrize(
    "path", sorted((ROOT / "promptlab" / "conversations").rglob("*.py")), ids=lambda p: p.name
)
def test_conversations_never_import_the_engine(path: Path) -> None:
    """Sessions, histories and shards are one idea in conversations/ (issue 39); the engine
    sends replayed turns with them (engine/send/histories.py, engine/send/sharding.py), never the
    reverse."""
    for name in runtime_imports(path):
        assert not (name == "promptlab.engine" or name.startswith("promptlab.engine.")), (
            f"conversations/{path.name} imports {name}"
        )


# ---- the shape of the library --------------------------------------------------------

LIBRARY = ROOT / "promptlab"
#: Where Streamlit may be imported: the UI package, the pages and the app's entry point.
STREAMLIT_HOMES = ("promptlab/ui/", "pages/", "app.py")
#: Room to grow (issue 39): a module past 450 lines or a function past 60 is split by idea.
MAX_MODULE_LINES = 450
MAX_FUNCTION_LINES = 60
#: A page is widgets, one facade call and render; what it draws lives in promptlab/ui/.
MAX_PAGE_LINES = 400
#: The package face, config, errors, records and the like; the rest lives in domain packages.
MAX_TOP_MODULES = 12
#: Functions allowed over MAX_FUNCTION_LINES, "path:qualified.name" -> why. Keep it empty.
LONG_FUNCTIONS: dict[str, str] = {}


def rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def code_files() -> list[Path]:
    """Every Python file of the library, the pages and the app."""
    pages = sorted((ROOT / "pages").glob("*.py"))
    return [*sorted(LIBRARY.rglob("*.py")), *pages, ROOT / "app.py"]


def imported_packages(path: Path) -> set[str]:
    """The top-level packages a file imports, at its top or inside a function."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


def function_lengths(path: Path) -> dict[str, int]:
    """Lines of every function and method (nested ones too), by `path:Qualified.name`."""
    lengths: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    end = child.end_lineno or child.lineno
                    lengths[f"{rel(path)}:{name}"] = end - child.lineno + 1
                visit(child, f"{name}.")
            else:
                visit(child, prefix)

    visit(ast.parse(path.read_text(encoding="utf-8")), "")
    return lengths


def test_duckdb_is_imported_only_in_the_store() -> None:
    outside = [
        rel(p)
        for p in code_files()
        if "duckdb" in imported_packages(p) and not rel(p).startswith("promptlab/store/")
    ]
    assert outside == []


def test_streamlit_is_imported_only_by_the_ui_the_pages_and_the_app() -> None:
    outside = [
        rel(p)
        for p in code_files()
        if "streamlit" in imported_packages(p) and not rel(p).startswith(STREAMLIT_HOMES)
    ]
    assert outside == []


def test_no_library_module_is_over_450_lines() -> None:
    sizes = {rel(p): len(p.read_text(encoding="utf-8").splitlines()) for p in LIBRARY.rglob("*.py")}
    assert {path: n for path, n in sorted(sizes.items()) if n > MAX_MODULE_LINES} == {}


def test_no_function_is_over_60_lines_unless_listed_with_its_reason() -> None:
    lengths = {k: n for path in code_files() for k, n in function_lengths(path).items()}
    too_long = {k: n for k, n in sorted(lengths.items()) if n > MAX_FUNCTION_LINES}
    assert {k: n for k, n in too_long.items() if k not in LONG_FUNCTIONS} == {}
    assert sorted(set(LONG_FUNCTIONS) - set(too_long)) == [], "no longer long: drop them"


#: Lines that may opt out of `ruff format` (issue 58): data tables only, where a row per
#: line reads better than the formatter's layout. The limits above hold on formatted code.
MAX_FORMAT_SKIPS = 20


def test_code_is_formatted_as_ruff_formats_it_with_few_skips() -> None:
    everything = [*code_files(), *(ROOT / "tests").rglob("*.py"), *(ROOT / "bench").rglob("*.py")]
    skips = [
        f"{rel(p)}:{n}"
        for p in everything
        for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if "fmt: skip" in line or "fmt: off" in line
    ]
    assert len(skips) <= MAX_FORMAT_SKIPS, skips


def test_no_page_is_over_400_lines() -> None:
    sizes = {
        p.name: len(p.read_text(encoding="utf-8").splitlines())
        for p in (ROOT / "pages").glob("*.py")
    }
    assert {name: n for name, n in sorted(sizes.items()) if n > MAX_PAGE_LINES} == {}


def test_the_top_of_the_library_holds_at_most_12_modules() -> None:
    top = sorted(p.name for p in LIBRARY.glob("*.py"))
    assert len(top) <= MAX_TOP_MODULES, top


def packages() -> list[Path]:
    """promptlab/ and every folder under it that holds Python files, at any depth."""
    found = {LIBRARY}
    for path in LIBRARY.rglob("*.py"):
        found.update(p for p in path.parents if p.is_relative_to(LIBRARY))
    return sorted(found)


@pytest.mark.parametrize("package", packages(), ids=rel)
def test_every_package_has_an_init_whose_docstring_is_one_line(package: Path) -> None:
    init = package / "__init__.py"
    assert init.is_file(), f"{rel(package)}/ has no __init__.py"
    doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8")))
    assert doc and "\n" not in doc.strip(), f"{rel(init)}: the docstring is not one line: {doc!r}"


# ---- the map in the docs -------------------------------------------------------------
#
# The fenced block under "## Project layout" in docs/explanation/architecture.md (the
# docs' architecture page; LAYOUT_PAGE), one line per entry:
#
#     <2 spaces per level><name><one or more spaces><description>
#
# - A name is one word ending in "/" (a folder; it may hold a "/" inside, as data/demo/)
#   or in ".py" (a module). Entries under a folder are indented one level (2 spaces)
#   more than the folder; an entry may go at most one level deeper than the innermost
#   folder above it, and back out to any shallower level.
# - A line indented at least as far as the column where the previous entry's description
#   starts continues that description.
# - Every other non-blank line is an error that names it, as is an entry without a
#   description and a path listed twice.

ENTRY = re.compile(r"(?P<name>\S*(?:/|\.py))(?: +(?P<text>\S.*))?")


class LayoutError(ValueError):
    """The layout block breaks its format; the message names the line."""


@dataclass(frozen=True)
class Entry:
    path: str  #: from the repository's root; a folder's ends in "/"
    text: str  #: the description, continuation lines joined by a space


#: The page that holds the layout map.
LAYOUT_PAGE = ROOT / "docs" / "explanation" / "architecture.md"


def layout_block(readme: str) -> str:
    """The first fenced block after the "## Project layout" heading, without its fences."""
    lines = readme.splitlines()
    if "## Project layout" not in lines:
        raise LayoutError("no '## Project layout' heading")
    rest = lines[lines.index("## Project layout") + 1 :]
    opening = next((i for i, line in enumerate(rest) if line.startswith(("```", "## "))), None)
    if opening is None or not rest[opening].startswith("```"):
        raise LayoutError("no fenced block under '## Project layout'")
    closing = next((i for i, line in enumerate(rest) if i > opening and line == "```"), None)
    if closing is None:
        raise LayoutError("the fenced block under '## Project layout' is not closed")
    return "\n".join(rest[opening + 1 : closing])


def parse_layout(block: str) -> list[Entry]:
    """The block's entries in order, each with its full path; LayoutError names a bad line."""
    entries: list[Entry] = []
    folders: list[str] = []  # the open folders, one per level
    text_column = None  # where the previous entry's description starts
    for number, line in enumerate(block.splitlines(), 1):
        body = line.lstrip(" ")
        if not body:
            continue
        indent = len(line) - len(body)
        if text_column is not None and indent >= text_column:
            entries[-1] = Entry(entries[-1].path, f"{entries[-1].text} {body.rstrip()}")
            continue
        match = ENTRY.fullmatch(body.rstrip())
        if match is None or indent % 2 or indent // 2 > len(folders):
            raise LayoutError(f"line {number}: neither an entry nor a continuation: {line!r}")
        if not match["text"]:
            raise LayoutError(f"line {number}: {match['name']} has no description")
        del folders[indent // 2 :]
        path = "".join(folders) + match["name"]
        if any(e.path == path for e in entries):
            raise LayoutError(f"line {number}: {path} is listed twice")
        entries.append(Entry(path, match["text"]))
        if path.endswith("/"):
            folders.append(match["name"])
        text_column = indent + match.start("text")
    return entries


SAMPLE_LAYOUT = """\
app.py           the entry point
pages/           thin pages
  runs.py        the Runs page: starts, follows and
                 cancels runs, the
                   deep ones too

promptlab/       the library
  engine/        the executor
    run.py       one item
  config.py      settings
data/demo/       demo files
"""


def test_the_layout_parser_reads_paths_levels_and_continuations() -> None:
    assert parse_layout(SAMPLE_LAYOUT) == [
        Entry("app.py", "the entry point"),
        Entry("pages/", "thin pages"),
        Entry(
            "pages/runs.py", "the Runs page: starts, follows and cancels runs, the deep ones too"
        ),
        Entry("promptlab/", "the library"),
        Entry("promptlab/engine/", "the executor"),
        Entry("promptlab/engine/run.py", "one item"),
        Entry("promptlab/config.py", "settings"),
        Entry("data/demo/", "demo files"),
    ]
    readme = f"# x\n\n## Project layout\n\n```\n{SAMPLE_LAYOUT}```\n\n## Next\n"
    assert layout_block(readme) == SAMPLE_LAYOUT.rstrip("\n")


@pytest.mark.parametrize(
    ("block", "error"),
    [
        ("promptlab/  the library\n    deep.py  too deep\n", "line 2: neither an entry"),
        ("promptlab/  the library\n  engine  no slash\n", "line 2: neither an entry"),
        ("app.py  the app\n  x.py  under a module\n", "line 2: neither an entry"),
        (" app.py  odd indent\n", "line 1: neither an entry"),
        ("      a description of nothing\n", "line 1: neither an entry"),
        ("pages/  pages\n  a.py\n", "line 2: a.py has no description"),
        ("app.py  one\napp.py  two\n", "line 2: app.py is listed twice"),
    ],
)
def test_the_layout_parser_names_the_line_it_cannot_read(block: str, error: str) -> None:
    with pytest.raises(LayoutError, match=re.escape(error)):
        parse_layout(block)


def test_the_docs_layout_lists_every_module_and_nothing_that_is_gone() -> None:
    entries = parse_layout(layout_block(LAYOUT_PAGE.read_text(encoding="utf-8")))
    listed = {e.path for e in entries}
    modules = {rel(p) for p in code_files() if p.name != "__init__.py"}
    gone = [
        e.path
        for e in entries
        if not ((ROOT / e.path).is_dir() if e.path.endswith("/") else (ROOT / e.path).is_file())
    ]
    assert {"missing": sorted(modules - listed), "gone": gone} == {"missing": [], "gone": []}
