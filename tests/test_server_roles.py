"""A principal behind every call (issue 37): tokens per person or service, a role on
every route, the caller recorded as the actor, idempotency keys that are the caller's.

The API runs in process (Starlette's TestClient drives the real ASGI app) over a real
DuckDB file; the CLI's token commands run directly on it."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from fastapi.routing import APIRoute
from starlette.testclient import TestClient

from promptlab.audit.actor import acting_as
from promptlab.cli import main
from promptlab.config import Settings
from promptlab.facades.tokens import TOKEN_ROLES, role_allows
from promptlab.server.api import create_app
from promptlab.server.roles import ROUTE_ROLES
from promptlab.workbench import Workbench

OWNER = "owner-token-for-tests"


@pytest.fixture
def wb(demo_db: Path) -> Iterator[Workbench]:
    with Workbench.open(Settings.from_env().with_db(demo_db)) as workbench:
        yield workbench


@pytest.fixture
def api(wb: Workbench) -> TestClient:
    return TestClient(create_app(wb, OWNER), raise_server_exceptions=False)


def _bearer(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


def _tokens(wb: Workbench) -> dict[str, str]:
    return {role: wb.tokens.create(f"{role}-person", role)[1] for role in TOKEN_ROLES}


def _concrete(path: str) -> str:
    return re.sub(r"\{[^}]+\}", "x", path)


def plugin_roles(api: TestClient) -> dict[tuple[str, str], str]:
    """The role table the app's guard enforces (ROUTE_ROLES and plugin routes')."""
    from promptlab.server.principals import Guard

    for middleware in api.app.user_middleware:  # type: ignore[attr-defined]
        if middleware.cls is Guard:
            return dict(middleware.kwargs["roles"])
    raise AssertionError("no guard")


def test_every_route_declares_a_role_and_every_role_is_enforced(
    wb: Workbench, api: TestClient
) -> None:
    app_routes = {
        (method, route.path)
        for route in api.app.routes  # type: ignore[attr-defined]
        if isinstance(route, APIRoute)
        for method in route.methods
    }
    app_routes -= {("GET", "/openapi.json")}
    # Installed plugins' routes (the sample's, promptlab/server/plugin_routes.py) declare
    # their role as they are added: under /v1/plugins/, and enforced alike.
    plugged = {r: role for r, role in plugin_roles(api).items() if r not in ROUTE_ROLES}
    assert all(path.startswith("/v1/plugins/") for _m, path in plugged)
    assert app_routes == set(ROUTE_ROLES) | set(plugged), app_routes ^ set(ROUTE_ROLES)
    tokens = _tokens(wb)
    for (method, path), needed in sorted({**ROUTE_ROLES, **plugged}.items()):
        url = _concrete(path)
        # No token, a wrong token: 401 before anything is read.
        assert api.request(method, url).status_code == 401, (method, path)
        assert api.request(method, url, headers=_bearer("pl_wrong")).status_code == 401
        for role in TOKEN_ROLES:
            status = api.request(method, url, headers=_bearer(tokens[role]), json={}).status_code
            allowed = role_allows(role, needed)
            if allowed:
                assert status not in (401, 403), (method, path, role, status)
            else:
                assert status == 403, (method, path, role, status)
    # The policy is in the served description, per operation.
    described = api.get("/openapi.json").json()["paths"]
    assert described["/v1/tokens"]["post"]["x-required-role"] == "admin"
    assert described["/v1/runs"]["get"]["x-required-role"] == "viewer"
    assert described["/v1/chat/completions"]["post"]["x-required-role"] == "gateway"
    # A gateway token (an application's) calls the gateway and feedback routes only.
    gateway_may = sorted(k for k in ROUTE_ROLES if role_allows("gateway", ROUTE_ROLES[k]))
    assert gateway_may == [
        ("POST", "/v1/chat/completions"),
        ("POST", "/v1/feedback/events"),
        ("POST", "/v1/messages"),
    ]


def test_a_token_is_shown_once_kept_as_a_hash_listed_and_revoked(
    wb: Workbench, api: TestClient, demo_db: Path
) -> None:
    made = api.post("/v1/tokens", json={"name": "alice", "role": "editor"}, headers=_bearer(OWNER))
    assert made.status_code == 201
    secret, token_id = made.json()["token"], made.json()["token_id"]
    # Alive, and no path of the server's machine to anyone but an admin.
    assert api.get("/v1/health", headers=_bearer(secret)).json() == {"ok": True}
    assert "database" in api.get("/v1/health", headers=_bearer(OWNER)).json()
    listed = api.get("/v1/tokens", headers=_bearer(OWNER)).json()
    assert [t["name"] for t in listed] == ["alice"] and "token" not in listed[0]
    assert secret not in str(listed)
    # Only an admin manages tokens: alice (an editor) can neither list nor make one.
    assert api.get("/v1/tokens", headers=_bearer(secret)).status_code == 403
    refused = api.post("/v1/tokens", json={"name": "m", "role": "admin"}, headers=_bearer(secret))
    assert refused.status_code == 403 and "alice is a editor" in refused.json()["error"]
    revoked = api.post(f"/v1/tokens/{token_id}/revoke", headers=_bearer(OWNER))
    assert revoked.status_code == 200 and revoked.json()["active"] is False
    assert api.get("/v1/health", headers=_bearer(secret)).status_code == 401
    events = [e for e in wb.audit.events(_filter("token.created"))]
    assert [e.payload["name"] for e in events] == ["alice"] and events[0].actor == "tester"
    wb.close()
    assert secret.encode() not in demo_db.read_bytes()


def test_the_cli_makes_lists_and_revokes_tokens(demo_db: Path) -> None:
    made = CliRunner().invoke(
        main, ["--db", str(demo_db), "token", "create", "ci-bot", "--role", "editor", "--service"]
    )
    assert made.exit_code == 0, made.output + made.stderr
    token_id, secret = made.stdout.split()[0], made.stdout.splitlines()[1]
    assert secret.startswith("pl_") and "shown once" in made.stderr
    listed = CliRunner().invoke(main, ["--db", str(demo_db), "token", "list"])
    assert "ci-bot" in listed.output and "editor, service" in listed.output
    assert secret not in listed.output and "active" in listed.output
    bad = CliRunner().invoke(main, ["--db", str(demo_db), "token", "create", "x", "--role", "god"])
    assert bad.exit_code == 2 and "god" in bad.stderr
    revoked = CliRunner().invoke(main, ["--db", str(demo_db), "token", "revoke", token_id])
    assert revoked.exit_code == 0 and f"revoked {token_id} (ci-bot)" in revoked.output
    again = CliRunner().invoke(main, ["--db", str(demo_db), "token", "revoke", token_id])
    assert again.exit_code == 1 and "no active token" in again.stderr


def test_the_actor_is_the_token_s_principal_a_service_acts_on_behalf(
    wb: Workbench, api: TestClient
) -> None:
    _, person = wb.tokens.create("alice", "editor")
    _, bot = wb.tokens.create("ci-bot", "editor", service=True)
    versions = api.get("/v1/prompts/ticket-triage/versions", headers=_bearer(person)).json()
    template = {**versions[0]["template"], "message": "m"}
    # A person's token is that person, whatever Promptlab-Author says.
    forged = {**_bearer(person), "Promptlab-Author": "mallory"}
    last = template["messages"][-1]
    template["messages"] = [*template["messages"][:-1], {**last, "content": f"{last['content']} 1"}]
    saved = api.post("/v1/prompts/ticket-triage/versions", json=template, headers=forged)
    assert saved.status_code == 201, saved.text
    assert saved.json()["version"]["author"] == "alice"
    # A service names whom it acts for, and both are recorded.
    template["messages"] = [*template["messages"][:-1], {**last, "content": f"{last['content']} 2"}]
    on_behalf = {**_bearer(bot), "Promptlab-Author": "bob"}
    saved = api.post("/v1/prompts/ticket-triage/versions", json=template, headers=on_behalf)
    assert saved.json()["version"]["author"] == "ci-bot on behalf of bob"
    actors = [e.actor for e in wb.audit.events(_filter("prompt_version.created"))][-2:]
    assert actors == ["alice", "ci-bot on behalf of bob"]


def test_idempotency_keys_are_the_caller_s_and_bound_to_the_body(
    wb: Workbench, api: TestClient
) -> None:
    _, alice = wb.tokens.create("alice", "editor")
    _, bob = wb.tokens.create("bob", "editor")
    csv = b"question\nwhy?\n"

    def upload(token: str, name: str, body: bytes = csv) -> Any:
        headers = {**_bearer(token), "Idempotency-Key": "same-key"}
        return api.post(f"/v1/datasets?name={name}&filename=q.csv", content=body, headers=headers)

    def result(token: str, answer: Any) -> Any:
        """An import answers with its job; its result once it has ended (a long poll)."""
        assert answer.status_code == 202, answer.text
        job = answer.json()["job_id"]
        ended = api.get(f"/v1/jobs/{job}?wait=30", headers=_bearer(token)).json()
        assert ended["state"] == "completed", ended
        return ended["result"]

    first = upload(alice, "alice-set")
    assert result(alice, first)["name"] == "alice-set"
    # Alice's retry gets her first job; nothing is imported twice.
    assert upload(alice, "alice-set").json()["job_id"] == first.json()["job_id"]
    # Bob's request with the same key is his own: it runs and answers his, and Alice's
    # job is not his to see.
    bobs = upload(bob, "bob-set")
    assert result(bob, bobs)["name"] == "bob-set"
    assert api.get(f"/v1/jobs/{first.json()['job_id']}", headers=_bearer(bob)).status_code == 404
    # The same key with another body is refused, not answered with the first.
    changed = upload(alice, "alice-set", b"question\nhow?\n")
    assert changed.status_code == 422 and "another body" in changed.json()["error"]
    assert {d.name for d in wb.datasets.list()} >= {"alice-set", "bob-set"}
    # The audit trail names the uploaded file as the client named it, not the server's
    # temporary copy.
    sources = {e.payload["source"] for e in wb.audit.events(_filter("dataset.imported"))}
    assert sources == {"q.csv"}


def test_there_is_no_command_line_route(api: TestClient) -> None:
    """`POST /v1/cli` ran any command line in the server (`--db X serve` started a second
    server inside the first); every command now has its typed routes."""
    for argv in (["prompt", "list"], ["--db", "other.duckdb", "serve"]):
        assert api.post("/v1/cli", json={"argv": argv}, headers=_bearer(OWNER)).status_code == 404


def _filter(kind: str) -> Any:
    from promptlab.store.audit import AuditFilter

    return AuditFilter(kind=kind)


def test_a_stale_label_move_is_a_409_naming_who_moved_it(wb: Workbench, api: TestClient) -> None:
    saw = wb.prompts.labels("ticket-triage")["production"]
    other = next(v for v in wb.prompts.versions("ticket-triage") if v.id != saw.id)
    url = "/v1/prompts/ticket-triage/labels/production"
    _, alice = wb.tokens.create("alice", "editor")
    _, bob = wb.tokens.create("bob", "editor")
    body = {"ref": other.semver, "expected": saw.semver}
    assert api.put(url, json=body, headers=_bearer(alice)).status_code == 200
    stale = api.put(url, json={"ref": saw.semver, "expected": saw.semver}, headers=_bearer(bob))
    assert stale.status_code == 409 and "alice" in stale.json()["error"], stale.text


def test_the_kill_switch_is_immediate_in_the_serving_process(
    wb: Workbench, api: TestClient
) -> None:
    """Before, a killed experiment was served from a 30-second cache; now the change
    replaces the cached config as it is saved."""
    body = {"experiment": "triage-split", "unit_ids": [f"u{i}" for i in range(20)]}
    first = api.post("/v1/assign", json=body, headers=_bearer(OWNER)).json()
    assert any(a["in_experiment"] for a in first["assignments"])
    with acting_as("admin-person"):
        killed = wb.experiments.update("triage-split", killed=True)
    after = api.post("/v1/assign", json=body, headers=_bearer(OWNER)).json()
    assert after["revision"] == killed.revision
    assert {a["reason"] for a in after["assignments"]} == {"killed"}
