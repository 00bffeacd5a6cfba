"""The deployment guide's systemd units (issue 59, item 3): each passes `systemd-analyze
verify` with no complaint (an unknown key is only a warning there, so any output fails
it), with the install's python made this venv's; and the promptlab commands they start
take the options they are given (`--help` after them: click refuses an unknown option
before it prints help)."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
UNITS = ROOT / "deploy" / "systemd"
INSTALLED_PYTHON = "/opt/promptlab/.venv/bin/python"
ANALYZE = shutil.which("systemd-analyze")


def units() -> list[Path]:
    return sorted(UNITS.glob("*.service"))


def exec_start(unit: Path) -> list[str]:
    """The unit's ExecStart command, its continuation lines joined, instance 1."""
    text = unit.read_text(encoding="utf-8").replace("\\\n", " ")
    (line,) = [ln for ln in text.splitlines() if ln.startswith("ExecStart=")]
    return shlex.split(line.removeprefix("ExecStart=").replace("%i", "1"))


def test_the_guide_ships_the_four_units() -> None:
    names = [u.name for u in units()]
    assert names == [
        "promptlab-app.service",
        "promptlab-gateway@.service",
        "promptlab-serve.service",
        "promptlab-worker@.service",
    ]
    for unit in units():
        text = unit.read_text(encoding="utf-8")
        assert "User=promptlab" in text and "NoNewPrivileges=true" in text, unit.name
        assert exec_start(unit)[0] == INSTALLED_PYTHON


@pytest.mark.skipif(ANALYZE is None, reason="systemd-analyze is not installed")
@pytest.mark.parametrize("unit", units(), ids=lambda u: u.name)
def test_each_unit_verifies_without_a_word(unit: Path, tmp_path: Path) -> None:
    assert ANALYZE is not None
    name = unit.name.replace("@.service", "@1.service")
    copy = tmp_path / name
    copy.write_text(unit.read_text(encoding="utf-8").replace(INSTALLED_PYTHON, sys.executable))
    done = subprocess.run(
        [ANALYZE, "verify", "--man=no", str(copy)], capture_output=True, text=True, timeout=60
    )
    assert (done.returncode, done.stdout + done.stderr) == (0, "")


@pytest.mark.parametrize(
    "unit", [u for u in units() if "launch" not in exec_start(u)], ids=lambda u: u.name
)
def test_the_commands_take_their_options(unit: Path) -> None:
    argv = [sys.executable, *exec_start(unit)[1:], "--help"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr


def test_make_run_passes_streamlit_options_on() -> None:
    """`make run ARGS="--secrets.files FILE"`: sign-in's secrets kept outside the checkout."""
    done = subprocess.run(
        ["make", "-n", "run", "ARGS=--secrets.files /etc/promptlab/secrets.toml"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    (launch,) = [ln for ln in done.stdout.splitlines() if "promptlab.ui.launch" in ln]
    assert launch.endswith("--secrets.files /etc/promptlab/secrets.toml")
