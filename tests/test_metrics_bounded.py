"""Bounded metrics (issue 60): `/metrics` label values come from configured endpoint
names only. A run spec declaring 200 endpoints (an e-mail address and a 300-character
name among them) adds one `promptlab_run_cap{run}` series while it runs and none that
outlive it; its attempts count under `endpoint="spec-declared"`."""

from __future__ import annotations

import time
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families
from starlette.testclient import TestClient

from promptlab.config import Settings
from promptlab.server.api import create_app
from promptlab.server.metrics import LABEL_VALUE, SPEC_DECLARED
from promptlab.workbench import Workbench
from tests.fakellm_fixtures import ServerFactory

TOKEN = "metrics-token-for-tests"
PATIENCE_S = 60.0


def series(text: str) -> set[tuple[str, frozenset[tuple[str, str]]]]:
    return {
        (sample.name, frozenset(sample.labels.items()))
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_two_hundred_declared_endpoints_add_no_series_that_outlive_their_run(
    db_path: Path, tmp_path: Path, fakellm_factory: ServerFactory
) -> None:
    server = fakellm_factory()
    server.gate(0)  # every request held: the run is running while it is scraped
    names = [f"e{i}" for i in range(198)] + ["someone@example.com", "n" * 300]
    used = ["e0", "e1", "someone@example.com", "n" * 300]
    dataset = tmp_path / "rows.csv"
    dataset.write_text("text\n" + "".join(f"row {i}\n" for i in range(3)))
    spec = {
        "name": "many-endpoints",
        "dataset": str(dataset),
        "endpoints": {n: {"kind": "openai", "base_url": server.openai_base_url} for n in names},
        "variants": [
            {
                "name": f"v{i}",
                "model": f"{n}:m",
                "params": {"max_tokens": 8},
                "messages": [{"role": "user", "content": "Say {{ text }}"}],
            }
            for i, n in enumerate(used)
        ],
    }
    with Workbench.open(Settings.from_env()) as wb:
        api = TestClient(create_app(wb, TOKEN))

        def scrape() -> str:
            answer = api.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
            assert answer.status_code == 200, answer.text
            return answer.text

        before = series(scrape())
        run_id = wb.runs.start(wb.runs.spec_from_data(spec))
        deadline = time.monotonic() + PATIENCE_S
        while server.stats()["held"] < len(used) * 3:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        during = series(scrape())
        server.gate(None)
        assert str(wb.runs.wait(run_id, PATIENCE_S).status) == "completed"
        after = series(scrape())
    values = {v for _, labels in before | during | after for _, v in labels}
    assert all(LABEL_VALUE.fullmatch(v) for v in values), values
    endpoints = {v for _, labels in during | after for k, v in labels if k == "endpoint"}
    assert not endpoints & set(names)
    run_caps = [labels for name, labels in during if name == "promptlab_run_cap"]
    assert run_caps == [frozenset({("run", run_id)})]
    assert not any(name == "promptlab_run_cap" for name, _ in after)
    # What grew is bounded: the run's states, items and attempts, not its endpoints.
    grown = {name for name, _ in after - before}
    assert len(after - before) < 40, sorted(after - before)
    attempts = [dict(labels) for name, labels in after if name == "promptlab_attempts_total"]
    assert {a["endpoint"] for a in attempts} >= {SPEC_DECLARED}
    assert "promptlab_attempts_total" in grown
