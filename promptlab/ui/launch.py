"""`make run`: the app's process opens its database, serves the API (PROMPTLAB_SERVE) and
starts the demo before Streamlit serves a page, then runs the `streamlit` command.

With plain `streamlit run app.py` all of that waits for the first visitor: a CLI run
started before anyone opened the browser would own the database, and the app would then
say the database is in use. Started as `python -m promptlab.ui.launch run app.py ...`,
the workbench is open when the port is, and the CLI finds the server at once. The
pages get the same workbench (ui/resources.py keeps one per database per process).
Lines are JSON when PROMPTLAB_LOG_FORMAT=json (ui/jsonlogs.py).
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import logging
import sys
from collections.abc import Iterable
from pathlib import Path

from promptlab.errors import StoreError

log = logging.getLogger(__name__)


def open_before_serving() -> None:
    """Open the workbench (and serve its API) and start the demo run, as the app's first
    page view would; a database another process holds is said once, and the app then
    shows it to every visitor as it always has."""
    from promptlab.ui.resources import get_workbench, start_demo_run

    try:
        get_workbench()
        start_demo_run()
    except StoreError as exc:
        print(f"promptlab: {exc}", file=sys.stderr)


def page_imports(script: Path) -> list[str]:
    """The modules the app script and its pages/ import by name (absolute imports)."""
    names: set[str] = set()
    for path in [script, *sorted((script.parent / "pages").glob("*.py"))]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names.add(node.module)
            elif isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
    return sorted(names)


def warm_page_imports(argv: list[str]) -> None:
    """Import what the pages import (pandas, Plotly through views/, the facades) before
    the port opens: the first visitor's page would otherwise wait for them, about a
    second on this 2-core machine (bench/pages.py, first visit)."""
    script = next((Path(a) for a in argv[1:] if a.endswith(".py")), None)
    if script is None or not script.is_file():
        return
    _import_each(page_imports(script))


def _import_each(names: Iterable[str]) -> None:
    for name in names:
        with contextlib.suppress(ImportError):  # the page says it when it runs
            importlib.import_module(name)


#: Imported inside functions on a page's first run, not at the top of a module: the
#: analysis's t and chi-square distributions (scipy.stats, about half a second here),
#: and Streamlit's emoji catalogue, whose pattern `st.set_page_config`'s emoji icon
#: compiles (a fifth of a second). Loaded before the port opens instead. (The charts'
#: plotly.graph_objects is not: a first view draws no chart.)
FIRST_VIEW_IMPORTS = ("scipy.stats", "streamlit.emojis")


def warm_first_view() -> None:
    _import_each(FIRST_VIEW_IMPORTS)


def main() -> None:
    from promptlab.ui.jsonlogs import main as streamlit_main
    from promptlab.ui.jsonlogs import streamlit_logs_as_json
    from promptlab.ui.resources import settle_heap

    # Before the workbench opens: opening it logs through Streamlit's loggers (its
    # caches, a script context missing), which wrote text lines ahead of the JSON.
    streamlit_logs_as_json()
    open_before_serving()
    warm_page_imports(sys.argv)
    warm_first_view()
    # What the process holds by now (the pages' imports, the workbench) leaves the
    # collector's walks, so each page's first settle collects only what that page made;
    # the first view's otherwise walked the whole heap on its script thread (0.28 s).
    # Settled under a name no page has.
    settle_heap("(before serving)")
    streamlit_main()


if __name__ == "__main__":
    main()
