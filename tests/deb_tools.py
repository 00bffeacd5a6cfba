"""Where the tests find the Debian programs they run: `make test` downloads the packages
and unpacks them under the venv (.venv/debs/PACKAGE/) rather than installing them,
because the packages' scripts would start daemons (Prometheus on 0.0.0.0:9090, nginx on
port 80); a program already on PATH serves as well. Tests that need one skip when these
return None, as the browser tests do without Chromium.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
UNPACKED = ROOT / ".venv" / "debs"


def _find(package: str, path: str) -> Path | None:
    """The unpacked program first (the version `make test` pins), then one on PATH."""
    unpacked = UNPACKED / package / path
    if unpacked.is_file() and os.access(unpacked, os.X_OK):
        return unpacked
    found = shutil.which(Path(path).name)
    return Path(found) if found else None


def promtool() -> Path | None:
    """promtool, which checks rule files and configs and runs rule unit tests."""
    return _find("prometheus", "usr/bin/promtool")


def prometheus() -> Path | None:
    """The Prometheus server, for tests that scrape and evaluate against a live one."""
    return _find("prometheus", "usr/bin/prometheus")


def nginx() -> Path | None:
    """nginx, for the reverse proxy of the deployment guide."""
    return _find("nginx", "usr/sbin/nginx")
