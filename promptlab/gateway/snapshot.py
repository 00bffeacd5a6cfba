"""What a `promptlab gateway` process serves from: the owner's experiments, the versions
they and the prompts' labels name, and the gateway tokens, in one signed document.

A gateway holds no database. The owner (`promptlab serve --gateway-relay`) builds this
document from its store, signs it with the secret it shares with its workers and
gateways (distributed/trust.py: PROMPTLAB_WORKER_SECRET, or the per-user file on a
loopback broker) and keeps it in Redis; each gateway reads it again every
REFRESH_S and serves from the last one that verified, whether the owner is up or not.
Anyone who reaches Redis can write there, so a document whose MAC does not verify is
never served: its tokens would let anyone in, its experiments send anyone anywhere.

Versions are held by id, as the owner holds them: every version a variant pins, each
prompt's latest, and every version a label points at (`prompt:NAME@label`,
`prompt:NAME@latest`, and `prompt:NAME@1.2.0` for those). A token is held as its
SHA-256 only, as the database holds it.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import orjson

from promptlab.errors import NotFoundError
from promptlab.experiments.config import ExperimentConfig
from promptlab.experiments.parsing import config_from_mapping
from promptlab.prompts.templates import Template
from promptlab.records.prompts import PromptVersion

#: What the MAC covers besides the document: a task's or an answer's never verifies here.
SNAPSHOT_CONTEXT = b"promptlab.gateway-snapshot/1\n"
#: The role a gateway process lets in (the tokens it is given): its routes only.
GATEWAY_ROLE = "gateway"


@dataclass(frozen=True)
class Caller:
    """A gateway token's holder, as the owner's database names it."""

    name: str
    service: bool
    token_id: str


@dataclass
class Snapshot:
    """The parsed document: what a gateway resolves a call's `model` and token against."""

    experiments: dict[str, ExperimentConfig] = field(default_factory=dict)
    versions: dict[str, PromptVersion] = field(default_factory=dict)
    #: `name@label` and `name@1.2.0` -> version id.
    refs: dict[str, str] = field(default_factory=dict)
    callers: dict[str, Caller] = field(default_factory=dict)
    #: When the owner built it (ISO 8601, its clock).
    built_at: str = ""
    #: Grows with every snapshot the owner publishes (a replayed older one is refused).
    serial: int = 0

    def experiment(self, name: str) -> ExperimentConfig:
        config = self.experiments.get(name)
        if config is None:
            raise NotFoundError(f"no experiment named {name!r} (as the owner last published)")
        return config

    def resolve(self, ref: str) -> PromptVersion:
        """`name@label`, `name@1.2.0` or `name@<version id>` (what a variant pins)."""
        name, _, selector = ref.partition("@")
        held = self.versions.get(selector)
        if held is None and ref in self.refs:
            held = self.versions.get(self.refs[ref])
        if held is None or held.prompt_name != name:
            raise NotFoundError(
                f"{ref}: not published to gateways (a gateway serves versions a label "
                "points at or an experiment pins)"
            )
        return held

    def caller(self, token_sha256: str) -> Caller | None:
        return self.callers.get(token_sha256)


# ---- the owner's side (server/gateway_relay.py builds the document) ----------------------


def version_dict(version: PromptVersion) -> dict[str, Any]:
    return {
        "prompt_name": version.prompt_name,
        "id": version.id,
        "semver": version.semver,
        "template": version.template.canonical(),
        "author": version.author,
        "message": version.message,
        "created_at": version.created_at.isoformat(),
        "parent_id": version.parent_id,
    }


def sealed(document: Mapping[str, Any], secret: bytes) -> bytes:
    """The document and its MAC, as kept in Redis."""
    body = orjson.dumps(document, option=orjson.OPT_SORT_KEYS)
    return orjson.dumps({"mac": _mac(secret, body), "body": body.decode()})


# ---- the gateway's side -----------------------------------------------------------------


class Unsealed(Exception):
    """A document this gateway will not serve from; the text says why."""


def opened(raw: bytes, secret: bytes) -> Snapshot:
    """The snapshot `raw` holds, if the owner sharing `secret` sealed it; Unsealed else."""
    try:
        outer = orjson.loads(raw)
        body, mac = outer["body"].encode(), outer["mac"]
    except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError):
        raise Unsealed("it is not a sealed snapshot") from None
    if not isinstance(mac, str) or not hmac.compare_digest(mac, _mac(secret, body)):
        raise Unsealed(
            "its MAC does not verify (written by someone else, or the owner's "
            "PROMPTLAB_WORKER_SECRET differs from this gateway's)"
        )
    document = orjson.loads(body)
    return Snapshot(
        experiments={
            c["name"]: config_from_mapping(c, "the owner's snapshot")
            for c in document["experiments"]
        },
        versions={v["id"]: _version(v) for v in document["versions"]},
        refs=dict(document["refs"]),
        callers={k: Caller(**v) for k, v in document["callers"].items()},
        built_at=str(document.get("built_at", "")),
        serial=int(document.get("serial", 0)),
    )


def _version(data: Mapping[str, Any]) -> PromptVersion:
    return PromptVersion(
        prompt_name=data["prompt_name"],
        id=data["id"],
        semver=data["semver"],
        template=Template.from_canonical(data["template"]),
        author=data["author"],
        message=data["message"],
        created_at=datetime.fromisoformat(data["created_at"]),
        parent_id=data["parent_id"],
    )


def _mac(secret: bytes, body: bytes) -> str:
    return hmac.new(secret, SNAPSHOT_CONTEXT + body, hashlib.sha256).hexdigest()
