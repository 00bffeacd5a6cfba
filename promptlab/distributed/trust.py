"""What a worker believes of a task: who sent it (an HMAC) and which endpoint it names.

A task on the broker is data anyone who reaches Redis can write. So a task carries an
HMAC-SHA256 of its arguments under a secret the owner and its workers share
(PROMPTLAB_WORKER_SECRET), and a worker executes nothing whose MAC does not verify.
On a loopback broker with the variable unset, owner and workers of one user share a
secret file instead, created owner-only (0600) on first use: WORKER_SECRET_FILE_ENV,
else `$XDG_CONFIG_HOME/promptlab/worker-secret` (`~/.config/promptlab/worker-secret`).
A broker off loopback requires the variable on both sides.

Answers travel back signed too: anyone who reaches Redis can push onto an owner's
replies list, so each answer carries an HMAC over its ticket (the item and attempt),
the worker that answered and the answer itself, and the owner takes in only what
verifies (`open_reply`). A worker stores the signed envelope under the ticket: one
delivered again later hands the owner the first sender's signature, unchanged.

An endpoint travels as its name and a hash of what decides where a request goes and
with which key (HASHED_FIELDS); each worker resolves it from its own providers file and
refuses a name it does not know or a hash that differs. Only a keyless endpoint on
loopback (what a run spec may declare) travels in full: it can reach nothing but this
machine and reads no key.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from promptlab.distributed.wire import endpoint_from_dict, endpoint_to_dict
from promptlab.engine.spec.endpoints import is_loopback
from promptlab.errors import ConfigError
from promptlab.providers.config import EndpointConfig

SECRET_ENV = "PROMPTLAB_WORKER_SECRET"
WORKER_SECRET_FILE_ENV = "PROMPTLAB_WORKER_SECRET_FILE"
#: A shorter shared secret is refused: it could be guessed offline from one task.
MIN_SECRET_CHARS = 16
#: What a MAC covers besides the arguments: a MAC made for another task (or an older
#: message layout) never verifies here.
MAC_CONTEXT = "promptlab.send_chunk/2"
#: The same for an answer: a task's MAC never verifies as an answer's, nor the reverse.
ANSWER_CONTEXT = "promptlab.answer/1"
#: Longest worker name an owner repeats in its log (a forger chooses it).
MAX_SENDER_CHARS = 120
#: The fields of an endpoint that decide where its requests go, how, and with which
#: key. Limits, prices and windows are each side's own; `executor` and `queue` only
#: route the task, and a run may set them.
HASHED_FIELDS = ("name", "kind", "base_url", "api_key_env", "transport", "latency_scale")
#: Broker URL schemes that reach a local socket file, never the network.
_LOCAL_SCHEMES = frozenset({"unix", "redis+socket", "socket"})


class Refused(Exception):
    """A task, or its endpoint, this worker will not act on; the text says why."""


# ---- the shared secret ---------------------------------------------------------------


def broker_on_loopback(url: str) -> bool:
    parts = urlsplit(url)
    if parts.scheme in _LOCAL_SCHEMES:
        return True
    return bool(parts.hostname) and is_loopback(parts.hostname or "")


def default_secret_file(environ: Mapping[str, str]) -> Path:
    if environ.get(WORKER_SECRET_FILE_ENV):
        return Path(environ[WORKER_SECRET_FILE_ENV]).expanduser()
    config_home = environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(config_home) / "promptlab" / "worker-secret"


def worker_secret(broker_url: str, environ: Mapping[str, str] | None = None) -> bytes:
    """The secret tasks are signed with: the variable, else (loopback broker only) the
    per-user file, created on first use. ConfigError, in one line, otherwise."""
    env = os.environ if environ is None else environ
    value = env.get(SECRET_ENV, "")
    if value:
        if len(value) < MIN_SECRET_CHARS:
            raise ConfigError(f"{SECRET_ENV} must be at least {MIN_SECRET_CHARS} characters")
        return value.encode()
    if not broker_on_loopback(broker_url):
        host = urlsplit(broker_url).hostname or broker_url
        raise ConfigError(
            f"{SECRET_ENV} is not set: the broker at {host} is not on loopback, so the owner "
            "and every worker need the same secret in it (e.g. `openssl rand -hex 32`)"
        )
    return _secret_from_file(default_secret_file(env))


def _secret_from_file(path: Path) -> bytes:
    try:
        return _read_secret_file(path)
    except FileNotFoundError:
        pass
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    descriptor = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(secrets.token_hex(32) + "\n")
    try:
        # A hard link never replaces: an owner and a worker starting together agree
        # on whichever file was linked first.
        os.link(temp, path)
    except FileExistsError:
        pass
    finally:
        temp.unlink(missing_ok=True)
    return _read_secret_file(path)


def _read_secret_file(path: Path) -> bytes:
    """The file's secret, if the file is this user's alone: one another user can read
    could sign tasks, and one they could write could be a secret they chose."""
    info = path.stat()
    if info.st_uid != os.getuid() or info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ConfigError(
            f"the worker secret file {path} must be owned by this user and readable by it "
            f"alone (chmod 600), or set {SECRET_ENV}"
        )
    value = path.read_text().strip()
    if len(value) < MIN_SECRET_CHARS:
        raise ConfigError(f"the worker secret file {path} holds under {MIN_SECRET_CHARS} chars")
    return value.encode()


# ---- signing -------------------------------------------------------------------------


def canonical(value: Any) -> bytes:
    """One byte string per JSON value, whatever the order of its keys: what the owner
    signs is what the worker checks after the broker's JSON round trip."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def task_mac(secret: bytes, reply_to: str, endpoint: Any, requests: Any) -> str:
    body = canonical([MAC_CONTEXT, reply_to, endpoint, requests])
    return hmac.new(secret, body, hashlib.sha256).hexdigest()


def signed_task(
    secret: bytes, reply_to: str, endpoint: dict[str, Any], requests: list[dict[str, Any]]
) -> tuple[list[Any], dict[str, str]]:
    """The task's args and kwargs, its MAC among them."""
    return [reply_to, endpoint, requests], {"mac": task_mac(secret, reply_to, endpoint, requests)}


@dataclass(frozen=True)
class Task:
    """A task whose MAC verified."""

    reply_to: str
    endpoint: dict[str, Any]
    requests: list[dict[str, Any]]


def open_task(secret: bytes, args: Any, kwargs: Any) -> Task:
    """The task, if it is one an owner holding `secret` signed; Refused otherwise."""
    mac = kwargs.get("mac") if isinstance(kwargs, dict) else None
    if not isinstance(mac, str) or not mac.isascii():
        raise Refused("it carries no signature (a forged task, or an older promptlab's owner)")
    if not isinstance(args, list | tuple) or len(args) != 3:
        raise Refused("its arguments are not a chunk's")
    reply_to, endpoint, requests = args
    if not hmac.compare_digest(mac, task_mac(secret, reply_to, endpoint, requests)):
        raise Refused(
            f"its signature does not verify (a forged task, or the owner's {SECRET_ENV} "
            "or secret file differs from this worker's)"
        )
    if not (
        isinstance(reply_to, str) and isinstance(endpoint, dict) and isinstance(requests, list)
    ):
        raise Refused("its arguments are not a chunk's")
    return Task(reply_to, endpoint, requests)


def answer_mac(secret: bytes, ticket: str, worker: str, answer: Any) -> str:
    body = canonical([ANSWER_CONTEXT, ticket, worker, answer])
    return hmac.new(secret, body, hashlib.sha256).hexdigest()


def sealed_answer(secret: bytes, ticket: str, worker: str, answer: dict[str, Any]) -> str:
    """What a worker stores under a ticket and hands its owner: the answer, who sent
    it, and the MAC over both and the ticket (JSON text)."""
    mac = answer_mac(secret, ticket, worker, answer)
    return json.dumps({"worker": worker, "answer": answer, "mac": mac})


def reply_of(ticket: str, sealed: str) -> str:
    """The line pushed onto an owner's replies list for a sealed answer."""
    return json.dumps({"ticket": ticket, **json.loads(sealed)})


@dataclass(frozen=True)
class Reply:
    """An answer whose MAC verified: the ticket it answers and the worker that sent it."""

    ticket: str
    worker: str
    answer: dict[str, Any]


def sender_of(line: str) -> str:
    """Who a reply line says sent it (unverified: for the log alone), bounded."""
    try:
        worker = json.loads(line).get("worker")
    except (ValueError, AttributeError):
        return "(unreadable)"
    if not worker:
        return "(unnamed)"
    return str(worker)[:MAX_SENDER_CHARS].encode("unicode_escape").decode()


def open_reply(secret: bytes, line: str) -> Reply:
    """The reply on an owner's list, if a worker holding `secret` signed it for its
    ticket; Refused, naming why, for anything forged, replayed or cut short."""
    try:
        reply = json.loads(line)
    except ValueError as exc:
        name = exc.__class__.__name__
        raise Refused(f"it is not JSON ({name}): cut short, or not an answer") from None
    if not isinstance(reply, dict):
        raise Refused("it is not an answer's object")
    ticket, worker, answer, mac = (reply.get(k) for k in ("ticket", "worker", "answer", "mac"))
    if not isinstance(mac, str) or not mac.isascii():
        raise Refused("it carries no signature (a forged answer, or an older promptlab's worker)")
    if not (isinstance(ticket, str) and isinstance(worker, str) and isinstance(answer, dict)):
        raise Refused("it lacks the ticket, worker or answer an answer has")
    if not hmac.compare_digest(mac, answer_mac(secret, ticket, worker, answer)):
        raise Refused(
            "its signature does not verify for its ticket (forged, another ticket's answer "
            f"replayed, or the worker's {SECRET_ENV} differs from the owner's)"
        )
    return Reply(ticket, worker, answer)


# ---- endpoints -----------------------------------------------------------------------


def endpoint_hash(cfg: EndpointConfig) -> str:
    fields = {name: getattr(cfg, name) for name in HASHED_FIELDS}
    return hashlib.sha256(canonical(fields)).hexdigest()


def travels_in_full(cfg: EndpointConfig) -> bool:
    """A keyless endpoint that reaches only this machine (or simulates): what a run spec
    may declare, and what a worker may take from a message as it is."""
    if cfg.api_key_env is not None:
        return False
    if cfg.kind == "sim":
        return True
    host = urlsplit(cfg.base_url or "").hostname
    return bool(host) and is_loopback(host or "")


def endpoint_ref(cfg: EndpointConfig) -> dict[str, Any]:
    """What a task says of its endpoint: the name and hash, and the whole configuration
    only when it travels in full."""
    ref: dict[str, Any] = {"name": cfg.name, "hash": endpoint_hash(cfg)}
    if travels_in_full(cfg):
        ref["config"] = endpoint_to_dict(cfg)
    return ref


def resolve_endpoint(
    ref: Mapping[str, Any], configured: Mapping[str, EndpointConfig]
) -> EndpointConfig:
    """The endpoint a task names, as this worker has it; Refused, naming why."""
    name, digest = str(ref.get("name")), ref.get("hash")
    full = ref.get("config")
    if isinstance(full, dict):
        try:
            cfg = endpoint_from_dict(full)
        except (TypeError, ValueError) as exc:
            raise Refused(f"endpoint {name!r}: its configuration is not readable ({exc})") from exc
        if not travels_in_full(cfg):
            raise Refused(
                f"endpoint {name!r}: only a keyless endpoint on loopback may come in a task; "
                "this one must be in the worker's providers file (PROMPTLAB_PROVIDERS)"
            )
    elif name in configured:
        cfg = configured[name]
    else:
        raise Refused(
            f"endpoint {name!r} is not configured on this worker: add it to the worker's "
            "providers file (PROMPTLAB_PROVIDERS), as the owner has it"
        )
    if cfg.name != name or not hmac.compare_digest(str(digest), endpoint_hash(cfg)):
        raise Refused(
            f"endpoint {name!r} is configured differently on this worker (kind, base_url, "
            "api_key_env or transport differ from the owner's): give both the same entry"
        )
    return cfg
