"""The CLI starts fast: commands import heavy libraries only where they use them.

Timing would be flaky on a busy machine, so these check what a fresh interpreter has
imported instead: a module that is never imported costs no start-up time. See
bench/startup.py for the wall-clock figures.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: Libraries no command needs before it does its work: the SDKs (only a run that sends
#: to their endpoints), the app's stack, and what the store and templates bring.
HEAVY = (
    "aiohttp",
    "anthropic",
    "duckdb",
    "jinja2",
    "jsonschema",
    "numpy",
    "openai",
    "pandas",
    "plotly",
    "pyarrow",
    "streamlit",
    "tiktoken",
)


def modules_after(code: str) -> set[str]:
    """Top-level names in sys.modules after running `code` in a fresh interpreter."""
    script = textwrap.dedent(code) + textwrap.dedent(
        """
        import json, sys
        print(json.dumps(sorted({name.split(".")[0] for name in sys.modules})))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return set(json.loads(result.stdout.splitlines()[-1]))


def invoke_cli(*args: str) -> str:
    return f"""
        from promptlab.cli import main
        try:
            main.main({list(args)!r}, standalone_mode=False)
        except SystemExit:
            pass
    """


@pytest.mark.parametrize(
    "args",
    [
        ("--help",),
        ("run", "--help"),
        ("prompt", "--help"),
        ("fakellm", "--help"),
        ("dataset", "--help"),
        ("dataset", "import", "--help"),
    ],
    ids=" ".join,
)
def test_help_imports_no_heavy_library(args: tuple[str, ...]) -> None:
    loaded = modules_after(invoke_cli(*args))
    assert not loaded & set(HEAVY), f"promptlab {' '.join(args)} imported {loaded & set(HEAVY)}"


def test_importing_the_package_loads_no_heavy_library() -> None:
    assert not modules_after("import promptlab") & set(HEAVY)


def test_public_names_still_load_on_first_use() -> None:
    loaded = modules_after(
        "from promptlab import Registry, Store, Template\n"
        "assert (Registry.__name__, Template.__module__) == "
        "('Registry', 'promptlab.prompts.templates')"
    )
    assert "duckdb" in loaded
    # jinja2 itself waits for the first template that is built (a batch builds none).
    assert "jinja2" not in loaded


def test_planning_a_run_imports_neither_pyarrow_nor_pandas(tmp_path: Path) -> None:
    # pyarrow imports pandas on its first array (~0.4 s); planning comes before a run's
    # first request, so it writes NumPy columns and only the writer uses Arrow.
    loaded = modules_after(
        f"""
        from promptlab.engine.plan.planner import AllVariants, plan_items
        from promptlab.records import VariantRecord
        from promptlab.store import ItemStore, RunStore, Store

        with Store({str(tmp_path / "plan.duckdb")!r}) as store:
            variant = VariantRecord(0, "v", "p@1.0.0", "sha256:p", "fake", "m", {{}}, {{}})
            RunStore(store).create_run("r1", "plan", {{}}, [variant])
            rows = [{{"text": "hello"}}, {{"text": "world"}}]
            planned = ItemStore(store).plan_items("r1", plan_items("r1", rows, ["v"],
                AllVariants(1), 1))
            pending = ItemStore(store).pending_chunk("r1", -1, [0], 10)
            assert planned == 2 and [p.values["text"] for p in pending] == ["hello", "world"]
        """
    )
    assert not loaded & {"pyarrow", "pandas"}
