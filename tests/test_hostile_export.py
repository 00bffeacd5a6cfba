"""Exports never replace what is not a regular file, say so in one line when a name cannot
be used, and a killed export leaves no temp file behind (promptlab/atomicfile.py)."""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from promptlab.cli import main
from promptlab.store import Store

pytestmark = pytest.mark.timeout(60)

#: Results rows seeded for the killed export: enough that its COPY lasts well past the
#: moment the test sees the file open (a few tens of MB of CSV).
KILL_ROWS = 40_000
#: Characters of a file name no common file system takes (NAME_MAX is 255 bytes).
LONG_NAME = 300


@pytest.fixture
def db(runs: tuple[Path, str, str], tmp_path: Path) -> Path:
    copy = tmp_path / "export.duckdb"
    shutil.copy(runs[0], copy)
    return copy


def cli(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


#: The two commands that write a file atomically: a table export and an audit export.
EXPORTS: dict[str, Callable[[Path, str, Path], list[str]]] = {
    "export": lambda db, run, out: ["--db", str(db), "export", "--run", run, "-o", str(out)],
    "audit export": lambda db, run, out: [
        "--db",
        str(db),
        "audit",
        "export",
        "--run",
        run,
        "-o",
        str(out),
    ],
}


def one_line_error(result: Result) -> str:
    """The error a refused command printed: exit 1, one line on stderr, no traceback."""
    assert result.exit_code == 1, (result.output, result.exception)
    assert isinstance(result.exception, SystemExit), result.exception
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: export: "), result.stderr
    return lines[0]


def make_fifo(folder: Path) -> Path:
    path = folder / "pipe.csv"
    os.mkfifo(path)
    return path


def make_folder(folder: Path) -> Path:
    path = folder / "folder.csv"
    path.mkdir()
    return path


def make_link_to_fifo(folder: Path) -> Path:
    fifo = make_fifo(folder)
    link = folder / "link.csv"
    link.symlink_to(fifo)
    return link


@pytest.mark.parametrize("command", list(EXPORTS))
@pytest.mark.parametrize(
    ("make", "kind"),
    [(make_fifo, "FIFO"), (make_folder, "folder"), (make_link_to_fifo, "FIFO")],
    ids=["fifo", "folder", "symlink-to-fifo"],
)
def test_a_target_that_is_not_a_regular_file_is_refused_even_with_force(
    db: Path,
    runs: tuple[Path, str, str],
    tmp_path: Path,
    command: str,
    make: Callable[[Path], Path],
    kind: str,
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    target = make(out)
    before = sorted(p.name for p in out.iterdir())
    result = cli(*EXPORTS[command](db, runs[1], target), "--force")
    if command == "audit export" and kind == "folder":
        assert result.exit_code == 2 and "is a directory" in result.output  # click's check
    else:
        error = one_line_error(result)
        assert str(target) in error and kind in error
    # Left as it was: the FIFO still a FIFO, the folder still a folder, nothing added.
    assert sorted(p.name for p in out.iterdir()) == before
    assert not stat.S_ISREG(os.stat(target).st_mode)


@pytest.mark.no_database  # the folder holds what the export left, and nothing else
@pytest.mark.parametrize("command", list(EXPORTS))
def test_a_name_too_long_for_the_file_system_is_one_line(
    db: Path, runs: tuple[Path, str, str], tmp_path: Path, command: str
) -> None:
    target = tmp_path / ("r" * LONG_NAME + ".csv")
    error = one_line_error(cli(*EXPORTS[command](db, runs[1], target)))
    assert "name too long" in error.lower()
    assert [p.name for p in tmp_path.iterdir()] == ["export.duckdb"]


# ---- a killed export ------------------------------------------------------------------


def seed_results(db: Path, rows: int) -> None:
    """`rows` results of about 1 KB each, straight into the store's table."""
    with Store(db) as store, store.transaction() as tx:
        tx.execute(
            "INSERT INTO results (idempotency_key, run_id, seq, row_index, variant, repeat, "
            "status, prompt_version_id, endpoint, model, output_text, attempts, finished_at) "
            "SELECT 'key-' || range, 'run_big', range, range, 'v', 0, 'succeeded', 'pv', "
            "'sim', 'fast', repeat('x', 1000), 1, now() FROM range(?)",
            [rows],
        )


def has_file_open_in(pid: int, folder: Path) -> bool:
    """True when process `pid` holds a file of `folder` open (named or not yet named)."""
    prefix = f"{folder}/"
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}").startswith(prefix):
                return True
        except OSError:
            continue
    return False


def kill_once(child: subprocess.Popen[bytes], ready: Callable[[], bool]) -> None:
    """SIGKILL `child` as soon as `ready()` says so; fail if it ends before that."""
    try:
        while not ready():
            if child.poll() is not None:
                _, err = child.communicate()
                pytest.fail(f"the child ended before it could be killed: {err!r}")
            time.sleep(0.001)
        child.send_signal(signal.SIGKILL)
        child.wait(10)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == -signal.SIGKILL


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc to see open files")
def test_an_export_killed_midway_leaves_no_temp_file(db_path: Path, tmp_path: Path) -> None:
    seed_results(db_path, KILL_ROWS)
    out = tmp_path / "out"
    out.mkdir()
    target = out / "results.csv"
    command = [sys.executable, "-m", "promptlab", "--db", str(db_path), "export", "--table"]
    child = subprocess.Popen(
        [*command, "results", "--format", "csv", "-o", str(target)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    kill_once(child, lambda: has_file_open_in(child.pid, out))  # while it writes
    # No temp file; the target only if the kill came after it was complete (a slow poll).
    assert [p.name for p in out.iterdir() if p != target] == []


# ---- where files cannot be unnamed: a temp name, swept once its writer is gone ------

#: A child that stages `target` under a temp name, writes part of it and waits to be killed.
WRITER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from promptlab.atomicfile import staged_file

    with staged_file(Path(sys.argv[1]), unnamed=False) as path:
        with open(path, "wb") as handle:
            handle.write(b"half of it")
        print("writing", flush=True)
        time.sleep(60)
    """
)


def test_a_named_temp_of_a_killed_export_is_swept_by_the_next_export_to_that_target(
    db: Path, runs: tuple[Path, str, str], tmp_path: Path
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    target = out / "results.csv"
    child = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(target)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    stdout = child.stdout
    assert stdout is not None
    kill_once(child, lambda: stdout.readline() == b"writing\n")
    stale = list(out.iterdir())
    assert len(stale) == 1 and stale[0].name.startswith(".results.csv.")  # what it left
    assert cli("--db", str(db), "export", "--run", runs[1], "-o", str(target)).exit_code == 0
    assert [p.name for p in out.iterdir()] == ["results.csv"]


@pytest.mark.no_database  # the folder holds what the export left, and nothing else
def test_the_temp_of_an_export_still_writing_is_not_swept(tmp_path: Path) -> None:
    from promptlab.atomicfile import staged_file

    target = tmp_path / "results.csv"
    with staged_file(target, force=True, unnamed=False) as first:
        first.write_bytes(b"first")
        with staged_file(target, force=True) as second:  # sweeps the stale ones only
            second.write_bytes(b"second")
        assert first.read_bytes() == b"first"
    assert target.read_bytes() == b"first"  # the last one published wins, with --force
    assert [p.name for p in tmp_path.iterdir()] == ["results.csv"]
