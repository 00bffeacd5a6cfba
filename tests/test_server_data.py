"""The server's API beyond runs (issue 24, item 1): prompts and versions, dataset and
feedback uploads streamed to disk, metrics and comparisons, streamed exports, the audit
trail. Against a real `promptlab serve` on the demo database (tests/test_server.py's
Served), and, for the upload bound, the real Starlette request it reads from."""

from __future__ import annotations

import asyncio
import csv
import http.client
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pyarrow.parquet as pq
import pytest
from starlette.requests import Request

from promptlab.server.uploads import UploadTooLarge, received_file
from tests.test_server import Served


@pytest.fixture
def demo_served(demo_db: Path) -> Iterator[Served]:
    server = Served(demo_db)
    try:
        yield server
    finally:
        server.stop()


def connect(served: Served) -> http.client.HTTPConnection:
    where = urlsplit(served.info.url)
    return http.client.HTTPConnection(where.hostname or "", where.port, timeout=60)


def send(
    served: Served, method: str, path: str, body: bytes, headers: dict[str, str] | None = None
) -> tuple[int, bytes, dict[str, str]]:
    """(status, body, headers) of a request whose body is raw bytes (an upload)."""
    conn = connect(served)
    try:
        conn.request(
            method,
            path,
            body=body,
            headers={
                "Authorization": f"Bearer {served.info.token}",
                "Content-Type": "application/json",
                **(headers or {}),
            },
        )
        resp = conn.getresponse()
        return resp.status, resp.read(), dict(resp.getheaders())
    finally:
        conn.close()


def get_raw(served: Served, path: str) -> tuple[int, bytes, dict[str, str]]:
    return send(served, "GET", path, b"")


def test_versions_are_read_saved_and_labelled_for_the_caller(demo_served: Served) -> None:
    status, versions = demo_served.call("GET", "/v1/prompts/ticket-triage/versions")
    assert status == 200
    assert [v["semver"] for v in versions] == ["2.0.0", "1.1.0", "1.0.0"]
    assert "production" in versions[1]["labels"] and versions[0]["template"]["messages"]

    template = dict(versions[0]["template"])
    template["messages"] = [*template["messages"]]
    template["messages"][-1] = {**template["messages"][-1]}
    template["messages"][-1]["content"] += "\nBe brief."
    body = json.dumps({**template, "message": "brief"}).encode()
    headers = {"Content-Type": "application/json", "Promptlab-Author": "grace"}
    status, raw, _ = send(demo_served, "POST", "/v1/prompts/ticket-triage/versions", body, headers)
    saved = json.loads(raw)
    assert status == 201 and saved["created"] and saved["version"]["semver"] == "2.1.0"
    assert saved["version"]["author"] == "tester on behalf of grace"
    # The same template again makes nothing, and says so.
    status, raw, _ = send(demo_served, "POST", "/v1/prompts/ticket-triage/versions", body, headers)
    assert status == 200 and json.loads(raw)["created"] is False

    status, moved = demo_served.call(
        "PUT", "/v1/prompts/ticket-triage/labels/staging", {"ref": "2.1.0"}
    )
    assert status == 200 and moved["semver"] == "2.1.0"
    status, events = demo_served.call("GET", "/v1/audit/events?kind=prompt_version.created")
    assert status == 200
    mine = [e for e in events if e["payload"]["ref"] == "ticket-triage@2.1.0"]
    assert [e["actor"] for e in mine] == ["tester on behalf of grace"]
    # A template that does not check is the one-line error, as in the CLI.
    bad = {"messages": [{"role": "user", "content": "{{ x.__class__ }}"}]}
    status, answer = demo_served.call("POST", "/v1/prompts/ticket-triage/versions", bad)
    assert status == 422 and "__class__" in answer["error"]
    status, answer = demo_served.call("GET", "/v1/prompts/no-such/versions")
    assert status == 404 and "no-such" in answer["error"]


def ended_job(served: Served, status: int, raw: bytes) -> Any:
    """An import answers with its job at once (202); the job once it has ended, asked
    with a long poll (the server answers when the job ends)."""
    job = json.loads(raw)
    assert status == 202 and job["kind"].endswith("-import"), job
    status, ended = served.call("GET", f"/v1/jobs/{job['job_id']}?wait=30")
    assert status == 200 and ended["state"] != "running", ended
    return ended


def imported(served: Served, status: int, raw: bytes) -> Any:
    """The importer's answer: the ended job's result."""
    ended = ended_job(served, status, raw)
    assert ended["state"] == "completed", ended
    return ended["result"]


def refused(served: Served, status: int, raw: bytes) -> str:
    """The importer's refusal: the failed job's one line (its class in `error_kind`)."""
    ended = ended_job(served, status, raw)
    assert ended["state"] == "failed" and ended["error_kind"], ended
    assert "Traceback" not in ended["error"]
    return str(ended["error"])


def test_a_dataset_upload_is_streamed_in_and_imported(demo_served: Served) -> None:
    rows = "".join(f"u{i % 50},{'x' * 200} {i}\n" for i in range(20_000))  # ~4 MB
    body = ("user,text\n" + rows).encode()
    path = "/v1/datasets?name=big&filename=big.csv&unit_column=user"
    status, raw, _ = send(demo_served, "POST", path, body, {"Idempotency-Key": "up-1"})
    first = json.loads(raw)
    info = imported(demo_served, status, raw)
    assert (info["name"], info["row_count"], info["unit_column"]) == ("big", 20_000, "user")
    # Retried with its key (the answer was lost): imported once, the same job.
    status, again, _ = send(demo_served, "POST", path, body, {"Idempotency-Key": "up-1"})
    assert json.loads(again)["job_id"] == first["job_id"]
    assert imported(demo_served, status, again) == info
    status, listed = demo_served.call("GET", "/v1/datasets")
    assert [d["name"] for d in listed].count("big") == 1
    status, shown = demo_served.call("GET", "/v1/datasets/big?limit=2")
    assert status == 200 and [r["user"] for r in shown["rows"]] == ["u0", "u1"]

    # Without replace, the same name is refused in one line; nothing changes.
    status, raw, _ = send(demo_served, "POST", path, b"user,text\nu1,y\n")
    assert "big" in refused(demo_served, status, raw)
    status, shown = demo_served.call("GET", "/v1/datasets/big?limit=1")
    assert shown["dataset"]["row_count"] == 20_000
    # A broken file names its line; a body claiming more than the cap is not read.
    status, raw, _ = send(
        demo_served, "POST", "/v1/datasets?name=bad&filename=bad.jsonl", b'{"a": 1}\n{"a": NaN}\n'
    )
    assert "line 2" in refused(demo_served, status, raw)
    conn = connect(demo_served)
    conn.putrequest("POST", "/v1/datasets?name=huge&filename=huge.csv")
    conn.putheader("Authorization", f"Bearer {demo_served.info.token}")
    conn.putheader("Content-Length", str(2**31))
    conn.endheaders()
    resp = conn.getresponse()
    assert resp.status == 413 and b"bytes" in resp.read()
    conn.close()


def test_an_upload_past_its_bound_stops_being_read() -> None:
    chunks = [b"a" * 1000] * 10
    sent = []

    async def receive() -> dict[str, object]:
        chunk = chunks.pop(0)
        sent.append(chunk)
        return {"type": "http.request", "body": chunk, "more_body": bool(chunks)}

    async def upload() -> None:
        request = Request({"type": "http", "method": "POST", "headers": []}, receive)
        async with received_file(request, "../../etc/rows.csv", max_bytes=3500) as path:
            raise AssertionError(f"read past the bound into {path}")

    with pytest.raises(UploadTooLarge, match="rows.csv: more than the 3,500 bytes"):
        asyncio.run(upload())
    assert len(sent) == 4  # stopped at the chunk that crossed the bound


def test_feedback_and_logs_upload_once_per_key(demo_served: Served) -> None:
    feedback = b"version,unit_id,kind\nticket-triage@1.1.0,u1,thumbs_up\n"
    for _ in range(2):
        status, raw, _ = send(
            demo_served,
            "POST",
            "/v1/feedback?filename=fb.csv",
            feedback,
            {"Idempotency-Key": "fb-1"},
        )
        assert imported(demo_served, status, raw) == {"rows": 1}
    status, events = demo_served.call("GET", "/v1/audit/events?kind=feedback.imported")
    assert len(events) == 1  # the retry ran nothing

    logs = b"ver,user,ms\nticket-triage@1.1.0,u1,120\nticket-triage@2.0.0,u2,90\n"
    status, raw, _ = send(
        demo_served,
        "POST",
        "/v1/logs?filename=logs.csv&column=version:ver&column=unit_id:user&column=latency_ms:ms",
        logs,
    )
    assert imported(demo_served, status, raw) == {"rows": 2}
    status, raw, _ = send(demo_served, "POST", "/v1/logs?filename=l.csv&column=version", logs)
    assert status == 422 and "FIELD:COLUMN" in json.loads(raw)["error"]


def test_metrics_comparisons_and_exports(demo_served: Served) -> None:
    status, runs = demo_served.call("GET", "/v1/runs")
    run_id = runs[0]["run_id"]
    status, rows = demo_served.call("GET", f"/v1/analysis/metrics?run_id={run_id}")
    assert status == 200 and len(rows) == 2 and all(r["finished"] > 0 for r in rows)
    status, comparison = demo_served.call("GET", f"/v1/runs/{run_id}/comparison")
    assert status == 200 and comparison["rows"], comparison
    status, answer = demo_served.call("GET", "/v1/runs/run_nope/comparison")
    assert status == 404 and "run_nope" in answer["error"]

    status, body, headers = get_raw(demo_served, f"/v1/exports/results?format=csv&run_id={run_id}")
    assert status == 200 and headers["content-type"].startswith("text/csv")
    lines = list(csv.reader(io.StringIO(body.decode())))  # an answer may hold a newline
    assert "run_id" in lines[0]
    assert len(lines) - 1 == sum(r["finished"] for r in rows)
    status, body, _ = get_raw(demo_served, "/v1/exports/attempts?format=parquet")
    assert status == 200 and body[:4] == b"PAR1"
    assert pq.read_table(io.BytesIO(body)).num_rows > 0
    status, body, _ = get_raw(demo_served, "/v1/exports/results?format=xlsx")
    assert status == 422 and b"csv" in body
    status, body, _ = get_raw(demo_served, "/v1/exports/secrets?format=csv")
    assert status in (400, 422) and b"secrets" in body and b"Traceback" not in body


def test_the_audit_trail_and_one_trace(demo_served: Served) -> None:
    status, results = demo_served.call("GET", "/v1/audit/events?kind=result&limit=3")
    assert status == 200 and len(results) == 3
    trace_id = results[0]["trace_id"]
    status, trace = demo_served.call("GET", f"/v1/audit/traces/{trace_id[:12]}")
    assert status == 200 and trace["trace_id"] == trace_id
    assert [e["kind"] for e in trace["events"]][-1] == "result"
    status, answer = demo_served.call("GET", "/v1/audit/traces/abc")
    assert status == 404 and "8 hex digits" in answer["error"]
    status, openapi = demo_served.call("GET", "/openapi.json", token=None)
    for route in ("/v1/datasets", "/v1/exports/{table}", "/v1/audit/traces/{trace}"):
        assert route in openapi["paths"]


def test_hostile_input_gets_one_line_never_a_500(demo_served: Served) -> None:
    """What a client may send wrong, each refused in one JSON line with a 4xx (review of
    issue 24): names, lone surrogates, bad variables, chunked PUTs, unknown routes."""
    path = "/v1/prompts/ticket-triage/versions"

    def error(status: int, raw: bytes) -> str:
        assert 400 <= status < 500, (status, raw)
        return str(json.loads(raw)["error"])

    for name in ("x%00.csv", "x" * 300 + ".csv"):
        status, raw, _ = send(
            demo_served, "POST", f"/v1/datasets?name=n&filename={name}", b"a\n1\n"
        )
        assert "filename" in error(status, raw)
    bad_variables = {"messages": [{"role": "user", "content": "{{ x }}"}], "variables": {"x": "s"}}
    status, raw, _ = send(demo_served, "POST", path, json.dumps(bad_variables).encode())
    assert "variables.x" in error(status, raw)
    lone = b'{"messages": [{"role": "user", "content": "\\ud800"}]}'
    status, raw, _ = send(demo_served, "POST", path, lone)
    assert "Unicode" in error(status, raw)
    status, raw, _ = send(
        demo_served, "PUT", "/v1/prompts/ticket-triage/labels/staging", b'{"ref": "\\ud800"}'
    )
    assert status == 404 and error(status, raw)
    # A number past 64 bits is kept, and read back.
    huge = {
        "messages": [{"role": "user", "content": "{{ text }}"}],
        "output_schema": {"type": "integer", "maximum": 10**26},
    }
    status, raw, _ = send(demo_served, "POST", path, json.dumps(huge).encode())
    assert status == 201, raw
    status, versions = demo_served.call("GET", path)
    assert status == 200 and versions[0]["template"]["output_schema"]["maximum"] == 10**26
    # A body without its length is refused for PUT as for POST; unknown routes say so.
    conn = connect(demo_served)
    conn.putrequest("PUT", "/v1/prompts/ticket-triage/labels/staging")
    conn.putheader("Authorization", f"Bearer {demo_served.info.token}")
    conn.putheader("Transfer-Encoding", "chunked")
    conn.endheaders()
    conn.send(b"0\r\n\r\n")
    resp = conn.getresponse()
    assert resp.status == 411 and "Content-Length" in json.loads(resp.read())["error"]
    conn.close()
    status, raw, _ = get_raw(demo_served, "/v1/no/such/route")
    assert status == 404 and error(status, raw) == "Not Found"
    # An author with a newline or NUL is stored as one printable line.
    body = json.dumps({**huge, "message": "m", "output_schema": None}).encode()
    status, raw, _ = send(demo_served, "POST", path, body, {"Promptlab-Author": "gr%00ace%0Ax"})
    assert status == 201 and json.loads(raw)["version"]["author"] == "tester on behalf of gracex"
    # An idempotency key is per route: the same key on feedback imports its file.
    send(
        demo_served,
        "POST",
        "/v1/datasets?name=kk&filename=kk.csv",
        b"a\n1\n",
        {"Idempotency-Key": "same"},
    )
    feedback = b"version,unit_id,kind\nticket-triage@1.1.0,u1,click\n"
    status, raw, _ = send(
        demo_served, "POST", "/v1/feedback?filename=f.csv", feedback, {"Idempotency-Key": "same"}
    )
    assert imported(demo_served, status, raw) == {"rows": 1}
