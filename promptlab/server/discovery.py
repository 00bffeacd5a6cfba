"""How clients find the server that owns a database: a file beside it, or the environment.

`promptlab serve` writes `<database>.server.json` (the URL, a token and its pid),
readable by its owner only, and removes it on exit. A client reads it; a file whose
process is gone is stale and ignored. `PROMPTLAB_SERVER=URL` with `PROMPTLAB_TOKEN`
names a server explicitly (another machine's, say).
"""

from __future__ import annotations

import json
import os
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path

from promptlab.errors import ConfigError

SERVER_ENV = "PROMPTLAB_SERVER"
TOKEN_ENV = "PROMPTLAB_TOKEN"


@dataclass(frozen=True)
class ServerInfo:
    """Where a server listens and the token its API wants."""

    url: str
    token: str
    pid: int | None = None


def discovery_path(db_path: Path) -> Path:
    return db_path.with_name(f"{db_path.name}.server.json")


def new_token() -> str:
    return secrets.token_urlsafe(32)


def write_discovery(db_path: Path, info: ServerInfo) -> Path:
    """The discovery file, created owner-only (0600) before the token is written in."""
    path = discovery_path(db_path)
    data = json.dumps({"url": info.url, "token": info.token, "pid": info.pid}).encode()
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temp.unlink(missing_ok=True)
    descriptor = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(data)
    os.replace(temp, path)  # whole or not at all: a client never reads half a token
    return path


def remove_discovery(db_path: Path, info: ServerInfo) -> None:
    """Remove the file if it is still this server's (a newer server may have replaced it)."""
    path = discovery_path(db_path)
    current = _read(path)
    if current is not None and current.token == info.token:
        path.unlink(missing_ok=True)


def find_server(db_path: Path, environ: dict[str, str] | None = None) -> ServerInfo | None:
    """The server clients of `db_path` should use, or None to open the file themselves."""
    env = os.environ if environ is None else environ
    url = env.get(SERVER_ENV)
    if url:
        token = env.get(TOKEN_ENV)
        if not token:
            raise ConfigError(f"{SERVER_ENV} is set: set {TOKEN_ENV} to the server's token too")
        return ServerInfo(url.rstrip("/"), token)
    info = _read(discovery_path(db_path))
    if info is None or (info.pid is not None and not _alive(info.pid)):
        return None
    return info


def _read(path: Path) -> ServerInfo | None:
    """The file's server, if the file is ours alone: one another user planted (or could
    change) would send our commands and specs to their server."""
    try:
        status = path.lstat()
        if not stat.S_ISREG(status.st_mode) or status.st_mode & 0o077:
            return None
        if hasattr(os, "getuid") and status.st_uid != os.getuid():
            return None
        data = json.loads(path.read_text())
        return ServerInfo(str(data["url"]), str(data["token"]), data.get("pid"))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True
