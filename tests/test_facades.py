"""One facade per domain: what each facade module offers is pinned, each stays small, and
every public method is used by a page, a command or a test (issue 21, item 2)."""

from __future__ import annotations

import importlib
import inspect
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from promptlab.config import Settings
from promptlab.facades.analysis import Analysis
from promptlab.facades.audit import Audit
from promptlab.facades.cache import Cache
from promptlab.facades.datasets import Datasets
from promptlab.facades.demo import Demo
from promptlab.facades.drift import Drift
from promptlab.facades.experiments import Experiments
from promptlab.facades.exports import Exports
from promptlab.facades.prompts import Prompts
from promptlab.facades.review import Review
from promptlab.facades.rollouts import Rollouts
from promptlab.facades.runs import Runs
from promptlab.facades.schedules import Schedules
from promptlab.facades.tokens import Tokens
from promptlab.store import Store
from promptlab.workbench import Workbench

ROOT = Path(__file__).resolve().parent.parent
FACADES_DIR = ROOT / "promptlab" / "facades"
#: A facade module's most lines (the issue's "about 400").
MAX_FACADE_LINES = 400
#: The composition root stays small: it only opens, composes and closes.
MAX_WORKBENCH_LINES = 150

#: Each module of promptlab/facades/ and its `__all__`, sorted.
MODULE_NAMES = {
    "analysis": [
        "Analysis",
        "Comparison",
        "LOG_FIELDS",
        "RunWithResults",
        "SideBySidePage",
        "SideBySideRow",
        "TimeSeries",
    ],
    "audit": ["Audit", "AuditFilter", "MAX_DOWNLOAD_EVENTS"],
    "cache": ["Cache", "CacheGroup", "CacheStats"],
    "context": ["Context"],
    "datasets": ["Datasets", "MAX_TURNS_SHOWN"],
    "decisions": ["Decided", "Decisions"],
    "demo": ["DEMO_FEEDBACK_JOIN_S", "Demo"],
    "drift": ["Drift", "RenderingDrift"],
    "experiments": ["AssignmentCount", "EXPOSURE_BATCH", "Experiments"],
    "exports": ["Exports"],
    "prompts": ["NO_VERSION", "Prompts"],
    "review": ["EXPORT_FORMATS", "MAX_ADDED", "MAX_ANSWER_CHARS", "Review"],
    "run_view": ["FAILURES_SHOWN", "RunView", "read_run_view"],
    "runs": ["RunEstimate", "RunProgress", "RunSpec", "RunView", "Runs"],
    "rollouts": ["GuardrailRow", "RolloutStatus", "Rollouts"],
    "schedules": ["Fired", "MAX_SCHEDULES", "Schedules", "firing_order"],
    "tokens": ["GATEWAY", "ROLES", "TOKEN_ROLES", "TokenRecord", "Tokens", "role_allows"],
}

#: Each facade as the workbench holds it (`wb.<attribute>`), with its public names.
FACADES: dict[str, tuple[type, list[str]]] = {
    "analysis": (
        Analysis,
        [
            "after_run_failures",
            "alerts",
            "compare",
            "compare_versions",
            "control_variant",
            "decisions",
            "detect_anomalies",
            "has_results",
            "import_feedback",
            "import_logs",
            "latencies",
            "log_latencies",
            "log_metrics",
            "log_metrics_over_time",
            "metrics",
            "metrics_over_time",
            "rate_result",
            "record_feedback_events",
            "repeats",
            "result_feedback",
            "runs_with_results",
            "scores",
            "sessions",
            "side_by_side",
        ],
    ),
    "cache": (Cache, ["clear", "stats", "with_mode"]),
    "drift": (Drift, ["check", "found", "rendering"]),
    "audit": (
        Audit,
        [
            "count",
            "events",
            "export",
            "export_bytes",
            "export_lines",
            "facets",
            "page_events",
            "record_export",
            "trace",
            "verify",
        ],
    ),
    "datasets": (
        Datasets,
        [
            "check_rows",
            "delete",
            "get",
            "import_file",
            "list",
            "preview",
            "rows",
            "session",
            "sessions",
            "set_unit_column",
        ],
    ),
    "demo": (Demo, ["join", "load", "record_feedback", "start_run"]),
    "experiments": (
        Experiments,
        [
            "add",
            "assignment_counts",
            "export",
            "exposure_counts",
            "get",
            "history",
            "import_exposures",
            "list",
            "on_change",
            "update",
        ],
    ),
    "exports": (Exports, ["comparison_bytes", "file_name", "table_bytes", "write_table"]),
    "prompts": (
        Prompts,
        [
            "create",
            "description",
            "diff",
            "export",
            "history",
            "import_file",
            "is_empty",
            "label_history",
            "labelled",
            "labels",
            "list",
            "resolve",
            "save_version",
            "set_label",
            "versions",
        ],
    ),
    "runs": (
        Runs,
        [
            "batch_spec",
            "batches",
            "cancel",
            "estimate",
            "experiment_spec",
            "field_failures",
            "is_active",
            "is_batch",
            "item",
            "items",
            "list",
            "load_spec",
            "parse_spec",
            "pause",
            "progress",
            "resume",
            "session",
            "shards",
            "spec_from_data",
            "start",
            "view",
            "wait",
            "write_batch_output",
        ],
    ),
    "review": (
        Review,
        [
            "accept",
            "add",
            "add_alerted",
            "add_failed_checks",
            "check_export_name",
            "correct",
            "counts",
            "crosscheck",
            "export",
            "list",
            "reject",
            "reopen",
            "show",
        ],
    ),
    "schedules": (
        Schedules,
        ["add", "fire_due", "get", "list", "next_due", "on_change", "pause", "remove", "resume"],
    ),
    "tokens": (Tokens, ["active_by_hash", "create", "find", "list", "revoke"]),
    "rollouts": (
        Rollouts,
        ["abort", "check", "check_all", "list", "pause", "resume", "status"],
    ),
}

#: Where facades are called from: the pages, the app, the commands, the Streamlit helpers,
#: the composition root and the tests.
CALLERS = (
    "pages/*.py",
    "app.py",
    "promptlab/cli/*.py",
    "promptlab/ui/*.py",
    "promptlab/server/*.py",
    "tests/*.py",
)


@pytest.fixture(scope="module")
def wb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Workbench]:
    db = tmp_path_factory.mktemp("facades") / "facades.duckdb"
    with Store(db) as store, Workbench(store, Settings.from_env().with_db(db)) as workbench:
        yield workbench


def public_names(facade: object) -> list[str]:
    """A facade's public methods and attributes (some are a store reader's method)."""
    members = {name for name, _ in inspect.getmembers(type(facade))}
    return sorted(n for n in members | set(vars(facade)) if not n.startswith("_"))


def test_every_facade_module_is_pinned() -> None:
    modules = sorted(p.stem for p in FACADES_DIR.glob("*.py") if p.stem != "__init__")
    assert modules == sorted(MODULE_NAMES)


@pytest.mark.parametrize("module", sorted(MODULE_NAMES))
def test_each_facade_module_has_a_sorted_pinned_all(module: str) -> None:
    names = importlib.import_module(f"promptlab.facades.{module}").__all__
    assert names == sorted(names)
    assert names == MODULE_NAMES[module]


@pytest.mark.parametrize("module", sorted(MODULE_NAMES))
def test_each_facade_module_stays_small(module: str) -> None:
    lines = (FACADES_DIR / f"{module}.py").read_text(encoding="utf-8").count("\n")
    assert lines <= MAX_FACADE_LINES, f"facades/{module}.py has {lines} lines"


def test_the_workbench_only_composes() -> None:
    import promptlab.workbench

    assert promptlab.workbench.__all__ == ["Workbench"]
    text = (ROOT / "promptlab" / "workbench.py").read_text(encoding="utf-8")
    assert text.count("\n") <= MAX_WORKBENCH_LINES


@pytest.mark.parametrize("attribute", sorted(FACADES))
def test_the_workbench_holds_each_facade_with_its_pinned_names(
    wb: Workbench, attribute: str
) -> None:
    kind, names = FACADES[attribute]
    facade = getattr(wb, attribute)
    assert isinstance(facade, kind)
    assert public_names(facade) == names


def test_the_facades_share_one_context(wb: Workbench) -> None:
    contexts = {id(getattr(wb, attribute)._context) for attribute in FACADES}
    assert len(contexts) == 1


@pytest.mark.parametrize("attribute", sorted(FACADES))
def test_every_public_name_is_called_somewhere(attribute: str) -> None:
    callers = [p for pattern in CALLERS for p in ROOT.glob(pattern)]
    callers.append(ROOT / "promptlab" / "workbench.py")
    text = "\n".join(p.read_text(encoding="utf-8") for p in callers if p.name != "test_facades.py")
    unused = [
        name for name in FACADES[attribute][1] if not re.search(rf"\.{attribute}\.{name}\b", text)
    ]
    assert not unused, f"wb.{attribute}: nothing calls {', '.join(unused)}"
