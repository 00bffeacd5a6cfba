"""What makes the pages load near Streamlit's floor (bench/pages.py): the collector
settled after a page's first run, the Audit page's verification shared for a minute.

Proposed as tests/test_page_load.py by the `pages` helper (issue 43, item 4).
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from pathlib import Path

import duckdb
from streamlit.testing.v1 import AppTest

from promptlab.store import Store
from promptlab.ui.resources import APP_YOUNG_THRESHOLD, close_all
from tests.apptest_helpers import shown

ROOT = Path(__file__).resolve().parent.parent
AUDIT_PAGE = str(ROOT / "pages" / "audit.py")
SETTLE = (
    "import gc\n"
    "from promptlab.ui.resources import settle_heap\n"
    "settle_heap('runs'); frozen = gc.get_freeze_count()\n"
    "settle_heap('runs'); again = gc.get_freeze_count()\n"
    "print(frozen > 0, again == frozen, gc.get_threshold()[0])\n"
)


#: `make run`'s launcher up to the point where it hands over to Streamlit, which here
#: prints whether the heap was frozen by then (no workbench opened, no demo started).
LAUNCH = (
    "import gc, sys\n"
    "import promptlab.ui.jsonlogs as streamlit_cli, promptlab.ui.launch as launch\n"
    "launch.open_before_serving = lambda: None\n"
    "streamlit_cli.main = lambda: print(gc.get_freeze_count() > 0)\n"
    "sys.argv = ['launch', 'run']\n"
    "launch.main()\n"
)


def settle_in_a_fresh_interpreter(script: str = SETTLE, **env: str) -> str:
    run = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
    )
    assert run.returncode == 0, run.stderr
    return run.stdout.split()


def test_a_page_s_first_run_freezes_the_heap_once_and_collects_young_objects_less_often() -> None:
    assert settle_in_a_fresh_interpreter() == ["True", "True", str(APP_YOUNG_THRESHOLD)]


def test_promptlab_tune_gc_0_leaves_the_collector_as_python_has_it() -> None:
    assert settle_in_a_fresh_interpreter(PROMPTLAB_TUNE_GC="0") == ["False", "True", "700"]


def test_make_run_freezes_what_it_imported_before_the_first_page_view() -> None:
    """The first view's settle_heap then collects what that page made, not the whole
    heap on the visitor's script run (0.28 s of it; its first view 1.76 s -> 1.61 s)."""
    assert settle_in_a_fresh_interpreter(LAUNCH) == ["True"]
    assert settle_in_a_fresh_interpreter(LAUNCH, PROMPTLAB_TUNE_GC="0") == ["False"]


def test_an_apptest_of_the_app_freezes_nothing_in_the_test_runner(demo_db: Path) -> None:
    """(The young threshold is not looked at: the app's engine raises it while a run of
    its goes, engine/collector.py.)"""
    before = gc.get_freeze_count()
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60).run()
    assert not at.exception
    assert gc.get_freeze_count() == before


def test_a_visit_within_a_minute_shows_the_last_verification_until_verify_now(
    tmp_path: Path, db_path: Path
) -> None:
    """Each visit opening the page no longer walks every chain again: a second visit
    shows the first one's verification, with the time it was made, even of a log
    changed since without a new event; "Verify now" walks them again."""
    from tests.test_audit_verify_rows import sim_run

    with Store(db_path) as store:
        sim_run(tmp_path, store, error_rate=0.0)
    first = AppTest.from_file(AUDIT_PAGE, default_timeout=30).run()
    assert not first.exception and "verified" in first.success[0].value
    close_all()  # the database is let go (a visit's cache is not)
    con = duckdb.connect(str(db_path))
    try:
        con.execute("UPDATE results SET output_text = 'forged' WHERE seq = 1")
    finally:
        con.close()
    second = AppTest.from_file(AUDIT_PAGE, default_timeout=30).run()
    assert [s.value for s in second.success] == [first.success[0].value]
    second.button(key="audit_verify").click().run()
    assert "results row of item" in shown(second.error[0].value)
