"""Streamlit's own log lines as JSON when PROMPTLAB_LOG_FORMAT=json (audit/logjson.py).

Streamlit configures its loggers itself: each it makes (`streamlit.logger.get_logger`)
gets a console handler of its own and does not propagate, and `setup_formatter` makes
that handler again whenever Streamlit reads its config. So the hook is there:
`setup_formatter` wrapped to give each handler it makes the JSON formatter (scrubbed as
promptlab's lines are), and the handlers made before the app's first run made again.

The app's script runs only when a first visitor opens it, and Streamlit logs and
prints lines of its own before that (the server started, where to open it; "Stopping"
when it ends). So in JSON mode the app is started through this module,
`python -m promptlab.ui.jsonlogs run app.py ...` (the `streamlit` command, with the hook
in place before Streamlit makes its first logger, and what it prints to the terminal
written as JSON lines of the `streamlit` logger); app.py applies the hook too, for an
app started with plain `streamlit run`.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable, Mapping
from typing import Any

import streamlit.cli_util as streamlit_cli
import streamlit.logger as streamlit_logger

from promptlab.audit.logjson import (
    json_formatter,
    json_line,
    json_logs_asked,
    uvicorn_json_defaults,
)

_lock = threading.Lock()


def streamlit_logs_as_json(environ: Mapping[str, str] | None = None) -> bool:
    """Streamlit's loggers write JSON lines from now on, when the environment asks for
    them (True then); once per process, however often the app's script runs."""
    if not json_logs_asked(environ):
        return False
    with _lock:
        made = streamlit_logger.setup_formatter
        if getattr(made, "promptlab_json", False):
            return True
        streamlit_logger.setup_formatter = _as_json(made)  # type: ignore[assignment]
        streamlit_logger.update_formatter()  # the loggers Streamlit made so far
        uvicorn_json_defaults()  # Streamlit's own uvicorn server applies uvicorn's defaults
    return True


def _as_json(setup: Callable[[logging.Logger], None]) -> Callable[[logging.Logger], None]:
    formatter = json_formatter()

    def setup_formatter(logger: logging.Logger) -> None:
        setup(logger)
        handler = getattr(logger, "streamlit_console_handler", None)
        if isinstance(handler, logging.Handler):
            handler.setFormatter(formatter)

    setup_formatter.promptlab_json = True  # type: ignore[attr-defined]
    return setup_formatter


class _Printed:
    """Streamlit's `print_to_cli` in JSON mode: each line it prints (a line may come in
    pieces, `nl=False`) one JSON line on stdout; blank lines and styles dropped."""

    def __init__(self) -> None:
        self._pending = ""

    def __call__(self, message: str, **style: Any) -> None:
        self._pending += message
        if style.get("nl", True) is False:
            return
        text, self._pending = self._pending.strip(), ""
        if text:
            sys.stdout.write(json_line("streamlit", logging.INFO, text) + "\n")
            sys.stdout.flush()


def main() -> None:
    """The `streamlit` command, every line it prints JSON when PROMPTLAB_LOG_FORMAT=json."""
    if streamlit_logs_as_json():
        streamlit_cli.print_to_cli = _Printed()
    from streamlit.web.cli import main as streamlit_main

    streamlit_main()


if __name__ == "__main__":
    main()
