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

import logging
import sys

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


def main() -> None:
    from promptlab.ui.jsonlogs import main as streamlit_main

    open_before_serving()
    streamlit_main()


if __name__ == "__main__":
    main()
