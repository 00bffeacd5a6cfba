"""Files that appear whole or not at all, and never in place of something that is not a file.

Exports (`promptlab export`, `promptlab audit export`) are written beside their target
and put in place in one step:

- **The target** must be a regular file, or not exist yet (`check_target`): a device,
  FIFO, socket or folder is refused even with `force`, and so is a symlink to one. A
  name the file system cannot take (too long) is refused in one line.
- **Unnamed while written.** On Linux the content goes into an unnamed file in the
  target's folder (`O_TMPFILE`), which gets its name only once it is complete
  (`linkat`): a process killed midway leaves nothing behind.
- **A named temp where that is not possible** (other systems, some network file
  systems): a hidden `.NAME.TOKEN.promptlab.tmp` beside the target, locked (`flock`) by
  its writer while it lives. Each export to a target first removes the temp files of
  that target whose writer is gone (their lock is free). A replacing publish
  (`force`) also names the finished file this way for the moment between link and
  rename.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import stat
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from promptlab.errors import ExportError

try:
    import fcntl
except ImportError:  # not POSIX: no locks, so no temp file is ever taken for stale
    fcntl = None  # type: ignore[assignment]

#: Ends the name of every temp file of ours: only such files are ever swept.
TEMP_SUFFIX = ".promptlab.tmp"
#: Characters of the target's name kept in a temp name, so that the temp name fits
#: wherever the target's does (file systems take 255 bytes a name).
TEMP_STEM_CHARS = 64
#: Hex digits of the random part of a temp name.
_TOKEN_BYTES = 6
#: Characters of a file name shown when it is refused as too long.
_NAME_SHOWN = 40
#: Opens an unnamed file in a folder (Linux only).
_O_TMPFILE: int | None = getattr(os, "O_TMPFILE", None)
#: Where Linux shows a process its open files: an unnamed file is reopened through it.
_OWN_FDS = Path("/proc/self/fd")
#: What file types are called in messages.
_KINDS = {
    stat.S_IFDIR: "folder",
    stat.S_IFCHR: "device",
    stat.S_IFBLK: "device",
    stat.S_IFIFO: "FIFO",
    stat.S_IFSOCK: "socket",
}


def check_target(path: str | Path, *, force: bool = False) -> Path:
    """The file to write: in an existing folder, a regular file only with `force`, and
    never anything else (device, FIFO, socket, folder, or a symlink to one)."""
    target = Path(path).expanduser()
    _refuse_existing(target, force=force)
    folder = target.parent
    if not folder.is_dir():
        raise ExportError(f"export: {target}: folder {folder} does not exist")
    return target


def _refuse_existing(target: Path, *, force: bool) -> None:
    try:
        info = os.stat(target)  # follows a symlink: what it points at is what is replaced
    except FileNotFoundError:
        if not force and os.path.lexists(target):  # a dangling symlink
            raise _exists(target) from None
        return
    except OSError as exc:  # a name too long, a parent that is a file, no permission
        raise _os_error(target, exc) from exc
    kind = stat.S_IFMT(info.st_mode)
    if kind == stat.S_IFDIR:
        raise ExportError(f"export: {target} is a folder; give a file name")
    if kind != stat.S_IFREG:
        raise ExportError(
            f"export: {target} is a {_KINDS.get(kind, 'special file')}, not a regular file; "
            "give a file name"
        )
    if not force:
        raise _exists(target)


def _exists(target: Path) -> ExportError:
    return ExportError(f"export: {target} already exists; pass --force to overwrite it")


def _os_error(target: Path, exc: OSError) -> ExportError:
    if exc.errno == errno.ENAMETOOLONG:
        size = len(os.fsencode(target.name))
        shown = target.name[:_NAME_SHOWN] + ("..." if len(target.name) > _NAME_SHOWN else "")
        return ExportError(
            f"export: file name too long for the file system ({size} bytes): {shown}"
        )
    return ExportError(f"export: cannot write {target}: {exc.strerror or exc}")


@contextmanager
def staged_file(target: Path, *, force: bool = False, unnamed: bool = True) -> Iterator[Path]:
    """A path to write the content of `target` to; on a clean exit it becomes `target`.

    Any writer may reopen the path while the block runs (Python, DuckDB's COPY). On an
    error nothing is published and nothing is left; a failure of the file system is one
    ExportError naming the target. `unnamed=False` uses a named temp file even where an
    unnamed one is possible (the tests' seam for other systems).
    """
    sweep_stale(target)
    staged: _Staged | None = None
    try:
        staged = _Staged.create(target, unnamed=unnamed)
        yield staged.path
        staged.publish(target, force=force)
    except OSError as exc:
        raise _os_error(target, exc) from exc
    except ExportError as exc:
        if staged is None or str(staged.path) not in str(exc):
            raise
        # DuckDB names the path it wrote to: the user knows the target.
        raise ExportError(str(exc).replace(str(staged.path), str(target))) from exc
    finally:
        if staged is not None:
            staged.discard()


def sweep_stale(target: Path) -> list[Path]:
    """Remove temp files of `target` whose writer is gone; return them."""
    if fcntl is None:
        return []
    pattern = re.compile(
        re.escape(f".{_stem(target)}.")
        + rf"[0-9a-f]{{{2 * _TOKEN_BYTES}}}"
        + re.escape(TEMP_SUFFIX)
    )
    swept = []
    with contextlib.suppress(OSError):
        for entry in os.scandir(target.parent):
            if pattern.fullmatch(entry.name) and _remove_if_unlocked(Path(entry.path)):
                swept.append(Path(entry.path))
    return swept


def _remove_if_unlocked(path: Path) -> bool:
    # O_NONBLOCK: a FIFO planted under such a name must not hang the export.
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK
    try:
        descriptor = os.open(path, flags)
    except OSError:
        return False
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            return False
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:  # locked: its writer is alive
        return False
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        return True
    finally:
        os.close(descriptor)


def _stem(target: Path) -> str:
    return target.name[:TEMP_STEM_CHARS]


def _temp_name(target: Path) -> Path:
    token = secrets.token_hex(_TOKEN_BYTES)
    return target.with_name(f".{_stem(target)}.{token}{TEMP_SUFFIX}")


class _Staged:
    """The file being written: its descriptor (locked), the path writers use, and its
    temp name while it has one."""

    def __init__(self, descriptor: int, path: Path, named: Path | None) -> None:
        self.descriptor = descriptor
        self.path = path
        self.named = named

    @classmethod
    def create(cls, target: Path, *, unnamed: bool) -> _Staged:
        if unnamed and _O_TMPFILE is not None and _OWN_FDS.is_dir():
            with contextlib.suppress(OSError):  # not supported here: name it instead
                descriptor = os.open(target.parent, _O_TMPFILE | os.O_WRONLY, 0o666)
                _lock(descriptor)
                return cls(descriptor, _OWN_FDS / str(descriptor), None)
        named = _temp_name(target)
        descriptor = os.open(named, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        # A sweep that locks it first (before this line) removes it; the writer then
        # creates the path anew, unlocked: the export still works, or fails in one line.
        _lock(descriptor)
        return cls(descriptor, named, named)

    def publish(self, target: Path, *, force: bool) -> None:
        """Give the finished file the target's name in one step; never clobber without
        `force`, never replace what is not a regular file (it may have appeared since)."""
        _refuse_existing(target, force=True)
        if self.named is None and not force:
            self._link(self.path, target)  # the unnamed file gets its name: nothing to undo
            return
        if self.named is None:
            # rename() cannot take an unnamed file: a temp name first (locked, swept if
            # the process dies before the rename).
            self.named = _temp_name(target)
            self._link(self.path, self.named)
        if force:
            os.replace(self.named, target)
            self.named = None
            return
        try:
            self._link(self.named, target)
        except OSError:  # a file system without hard links: check, then rename
            if os.path.lexists(target):
                raise _exists(target) from None
            os.replace(self.named, target)
            self.named = None

    @staticmethod
    def _link(source: Path, name: Path) -> None:
        """A hard link, failing if `name` exists (where a rename would clobber it)."""
        folder = os.open(name.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            # A folder descriptor makes CPython call linkat() with AT_SYMLINK_FOLLOW, which
            # an unnamed file's /proc/self/fd link needs (plain link() does not follow it).
            os.link(source, name.name, dst_dir_fd=folder)
        except FileExistsError:
            raise _exists(name) from None
        finally:
            os.close(folder)

    def discard(self) -> None:
        if self.named is not None:
            with contextlib.suppress(FileNotFoundError):
                self.named.unlink()
        os.close(self.descriptor)


def _lock(descriptor: int) -> None:
    """Hold the file's lock while this process lives: a sweep then leaves it alone."""
    if fcntl is None:
        return
    # A file system without locks (some network mounts) still exports: only a second
    # export to the same target at the same moment could then take the file for stale,
    # and this one would fail in one line.
    with contextlib.suppress(OSError):
        fcntl.flock(descriptor, fcntl.LOCK_EX)


def write_chunks(path: str | Path, chunks: Iterable[bytes], *, force: bool = False) -> int:
    """`chunks` written to `path` whole or not at all (check_target's rules); returns how
    many lines they held. For a file streamed from elsewhere (a server's export)."""
    target = check_target(path, force=force)
    lines = 0
    with staged_file(target, force=force) as staged, staged.open("wb") as handle:
        for chunk in chunks:
            handle.write(chunk)
            lines += chunk.count(b"\n")
    return lines
