"""Where the tests find Prometheus's binaries: `make prometheus` unpacks Debian's package
under the venv (.venv/prometheus/usr/bin) rather than installing it, because the package
would start a daemon on 0.0.0.0:9090; a promtool or prometheus already on PATH serves as
well. Tests that need one skip when these return None, as the browser tests do without
Chromium.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
UNPACKED_BIN = ROOT / ".venv" / "prometheus" / "usr" / "bin"


def _find(name: str) -> Path | None:
    """The unpacked binary first (the version `make test` pins), then one on PATH."""
    unpacked = UNPACKED_BIN / name
    if unpacked.is_file() and os.access(unpacked, os.X_OK):
        return unpacked
    found = shutil.which(name)
    return Path(found) if found else None


def promtool() -> Path | None:
    """promtool, which checks rule files and configs and runs rule unit tests."""
    return _find("promtool")


def prometheus() -> Path | None:
    """The Prometheus server, for tests that scrape and evaluate against a live one."""
    return _find("prometheus")
