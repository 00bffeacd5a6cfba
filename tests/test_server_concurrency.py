"""No process-wide lock (issue 37): twenty clients at once (exports, status, run lists,
audit streams, refusals) each get their answer, and a status answers while an export
is still streaming to another client. A real `promptlab serve` child on loopback."""

from __future__ import annotations

import shutil
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from promptlab.errors import PromptlabError
from promptlab.server.client import ServerClient
from tests.test_server import Served


@pytest.fixture
def served(runs: tuple[Path, str, str], tmp_path: Path) -> Any:
    copy = tmp_path / "runs.duckdb"
    shutil.copyfile(runs[0], copy)
    server = Served(copy)
    try:
        yield server
    finally:
        server.stop()


def test_a_status_answers_while_an_export_streams(
    served: Served, runs: tuple[Path, str, str]
) -> None:
    run_id = runs[1]
    request = urllib.request.Request(
        f"{served.info.url}/v1/audit/export?run_id={run_id}",
        headers={"Authorization": f"Bearer {served.info.token}"},
    )
    with urllib.request.urlopen(request, timeout=60) as streaming:  # noqa: S310 - loopback
        first = streaming.read(256)
        assert first.startswith(b"{")
        # The export's answer is open and unread; another client's status answers.
        status, progress = served.call("GET", f"/v1/runs/{run_id}?summary=true")
        assert status == 200 and progress["status"] == "completed"
        rest = streaming.read()
    assert (first + rest).count(b"\n") > 10


def test_twenty_clients_at_once_each_get_their_answer(
    served: Served, runs: tuple[Path, str, str], tmp_path: Path
) -> None:
    client = ServerClient(served.info, timeout_s=120)
    run_id = runs[1]

    def export(i: int) -> str:
        target = tmp_path / f"export-{i}.csv"
        headers = client.fetch_file(f"/v1/exports/results?format=csv&run_id={run_id}", target)
        return f"export {headers['x-rows']}"

    def status(_i: int) -> str:
        return f"status {client.get(f'/v1/runs/{run_id}')['status']}"

    def listing(_i: int) -> str:
        return f"runs {len(client.get('/v1/runs'))}"

    def audit(_i: int) -> str:
        chunks = client.chunks(f"/v1/audit/export?run_id={run_id}")
        lines = sum(chunk.count(b"\n") for chunk in chunks)
        return f"audit {lines}"

    def refused(_i: int) -> str:
        try:
            client.post("/v1/runs/run_nope/cancel")
        except PromptlabError as exc:
            return f"refused {'run_nope' in str(exc)}"
        return "refused False"

    calls = [export] * 5 + [status] * 5 + [listing] * 4 + [audit] * 3 + [refused] * 3
    with ThreadPoolExecutor(max_workers=len(calls)) as pool:
        answers = list(pool.map(lambda pair: pair[1](pair[0]), enumerate(calls)))
    assert len(answers) == 20
    assert {a for a in answers if a.startswith("status")} == {"status completed"}
    assert {a for a in answers if a.startswith("refused")} == {"refused True"}
    exports = {a for a in answers if a.startswith("export")}
    assert len(exports) == 1 and exports != {"export 0"}
    # Each export is audited under the run (table.exported): an audit stream read while
    # some of the five exports land holds up to five lines more than one read before.
    audits = [int(a.split()[1]) for a in answers if a.startswith("audit")]
    assert len(audits) == 3 and min(audits) > 0 and max(audits) - min(audits) <= 5
