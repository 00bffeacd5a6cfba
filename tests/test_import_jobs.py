"""Imports through a server are jobs with ids (issue 37): the upload answers with its
job at once, other calls answer while the import runs, and the job's result is what the
importer answered; a job is its caller's."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from promptlab.config import Settings
from promptlab.server.api import create_app
from promptlab.workbench import Workbench

OWNER = "owner-token-for-tests"
HEADERS = {"Authorization": f"Bearer {OWNER}"}


@pytest.fixture
def wb(demo_db: Path) -> Iterator[Workbench]:
    with Workbench.open(Settings.from_env().with_db(demo_db)) as workbench:
        yield workbench


def test_an_import_is_a_job_and_other_calls_answer_while_it_runs(
    wb: Workbench, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The import is held at a gate, so "while it runs" is a fact, not a race.
    entered, gate = threading.Event(), threading.Event()
    real = wb.datasets.import_file

    def held(*args: Any, **kwargs: Any) -> Any:
        entered.set()
        assert gate.wait(60)
        return real(*args, **kwargs)

    monkeypatch.setattr(wb.datasets, "import_file", held)
    api = TestClient(create_app(wb, OWNER), raise_server_exceptions=False)
    answer = api.post(
        "/v1/datasets?name=held&filename=h.csv", content=b"a\n1\n2\n", headers=HEADERS
    )
    assert answer.status_code == 202, answer.text
    job = answer.json()
    assert (job["kind"], job["state"]) == ("dataset-import", "running")
    assert entered.wait(30)
    # The import is running: its job says so, and other calls answer.
    assert api.get(f"/v1/jobs/{job['job_id']}", headers=HEADERS).json()["state"] == "running"
    assert "held" not in [d["name"] for d in api.get("/v1/datasets", headers=HEADERS).json()]
    assert api.get("/v1/runs", headers=HEADERS).status_code == 200
    # Another principal cannot see it.
    _, other = wb.tokens.create("bob", "editor")
    assert (
        api.get(
            f"/v1/jobs/{job['job_id']}", headers={"Authorization": f"Bearer {other}"}
        ).status_code
        == 404
    )
    gate.set()
    ended = api.get(f"/v1/jobs/{job['job_id']}?wait=30", headers=HEADERS).json()
    assert ended["state"] == "completed", ended
    assert (ended["result"]["name"], ended["result"]["row_count"]) == ("held", 2)


def test_a_refused_import_is_a_failed_job_naming_the_line(wb: Workbench) -> None:
    api = TestClient(create_app(wb, OWNER), raise_server_exceptions=False)
    answer = api.post(
        "/v1/datasets?name=bad&filename=bad.jsonl",
        content=b'{"a": 1}\n{"a": NaN}\n',
        headers=HEADERS,
    )
    ended = api.get(f"/v1/jobs/{answer.json()['job_id']}?wait=30", headers=HEADERS).json()
    assert ended["state"] == "failed" and "line 2" in ended["error"]
    assert ended["error_kind"] == "DatasetError"
    assert "bad" not in {d.name for d in wb.datasets.list()}
