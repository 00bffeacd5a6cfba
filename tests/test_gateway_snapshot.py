"""The snapshot an owner publishes for its gateway processes (promptlab/gateway/snapshot.py):
what it holds, what it leaves out, and that only the owner's secret seals it."""

from __future__ import annotations

import hashlib

import orjson
import pytest

from promptlab.config import Settings
from promptlab.errors import NotFoundError
from promptlab.gateway.snapshot import Unsealed, opened, sealed
from promptlab.server.gateway_relay import build_document
from promptlab.workbench import Workbench
from tests.test_gateway import fake as fake  # fixtures
from tests.test_gateway import set_up

SECRET = b"a-secret-of-thirty-two-characters"


@pytest.fixture
def wb(fake: object) -> Workbench:
    with Workbench.open(Settings.from_env()) as opened_wb:
        yield opened_wb


def test_it_holds_the_experiments_pinned_labelled_and_latest_versions_and_gateway_tokens(
    wb: Workbench,
) -> None:
    token = set_up(wb)
    viewer = wb.tokens.create("reader", "viewer")[1]
    first = wb.prompts.resolve("greet@latest")
    wb.prompts.set_label("greet", first.semver, "production")
    snapshot = opened(sealed(build_document(wb), SECRET), SECRET)
    assert snapshot.experiment("greet-ab").variant("kind").prompt_version_id == first.id
    for ref in ("greet@production", "greet@latest", f"greet@{first.semver}", f"greet@{first.id}"):
        assert snapshot.resolve(ref).template.canonical() == first.template.canonical()
    assert snapshot.caller(hashlib.sha256(token.encode()).hexdigest()) is not None
    assert snapshot.caller(hashlib.sha256(viewer.encode()).hexdigest()) is None
    with pytest.raises(NotFoundError, match="not published to gateways"):
        snapshot.resolve("greet@9.9.9")
    with pytest.raises(NotFoundError, match="no experiment named 'other'"):
        snapshot.experiment("other")


def test_a_revoked_gateway_token_leaves_the_next_snapshot(wb: Workbench) -> None:
    set_up(wb)
    record, token = wb.tokens.create("old-app", "gateway")
    digest = hashlib.sha256(token.encode()).hexdigest()
    assert digest in build_document(wb)["callers"]
    wb.tokens.revoke(record.token_id)
    assert digest not in build_document(wb)["callers"]


def test_a_snapshot_sealed_with_another_secret_or_changed_is_refused(wb: Workbench) -> None:
    set_up(wb)
    raw = sealed(build_document(wb), SECRET)
    with pytest.raises(Unsealed, match="MAC does not verify"):
        opened(raw, b"another-secret-of-thirty-two-chars")
    outer = orjson.loads(raw)
    outer["body"] = outer["body"].replace("greet-ab", "greet-xx")
    with pytest.raises(Unsealed, match="MAC does not verify"):
        opened(orjson.dumps(outer), SECRET)
    with pytest.raises(Unsealed, match="not a sealed snapshot"):
        opened(b"[1, 2]", SECRET)
