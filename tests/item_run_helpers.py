"""A run worth opening item by item: two variants over fakellm, retries, one invalid row.

Shared by the item read-model, CLI and Runs page tests.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from promptlab.engine import RunSpec, parse_spec
from promptlab.fakellm.server import FakeLLMConfig, RunningServer, serve_in_thread
from promptlab.workbench import Workbench

#: Dataset rows; the row at BAD_ROW has no `text`, so it fails validation (never sent).
ROWS = 20
BAD_ROW = 3
VARIANTS = ("briefed", "plain")
SYSTEM = "You are a {{ tone }} assistant."
USER = "Summarize: {{ text }}"


def row(i: int) -> dict[str, Any]:
    values: dict[str, Any] = {"text": f"ticket alpha-{i:02d}", "tone": "terse", "budget": 20 + i}
    if i == BAD_ROW:
        del values["text"]
    return values


def item_spec(tmp_path: Path, base_url: str, rows: int = ROWS) -> RunSpec:
    """Every row through both variants; `briefed` takes max_tokens from the `budget` column."""
    dataset = tmp_path / "items.jsonl"
    dataset.write_text("".join(json.dumps(row(i)) + "\n" for i in range(rows)))
    return parse_spec(
        {
            "name": "item-view",
            "dataset": str(dataset),
            "variants": [
                {
                    "name": VARIANTS[0],
                    "messages": [
                        {"role": "system", "content": SYSTEM},
                        {"role": "user", "content": USER},
                    ],
                    "model": "fake:gpt-4o-mini",
                    "params": {"max_tokens": 16, "temperature": 0.2},
                    "params_from": {"max_tokens": "budget"},
                },
                {
                    "name": VARIANTS[1],
                    "messages": [{"role": "user", "content": USER}],
                    "model": "fake:gpt-4o-mini",
                    "params": {"max_tokens": 12},
                },
            ],
            "endpoints": {"fake": {"kind": "openai", "base_url": base_url}},
            "limits": {"fake": {"rpm": 60_000, "concurrency": 8}},
            "retry": {
                "max_attempts": 6,
                "backoff_base_s": 0.01,
                "backoff_cap_s": 0.05,
                "timeout_s": 10,
            },
        }
    )


@pytest.fixture
def retrying_server() -> Iterator[RunningServer]:
    """fakellm where 40% of attempts get a 500: several items need retries (and wait)."""
    config = FakeLLMConfig(port=0, latency_ms=1, fail_rate=0.4, seed=7, record_requests=1_000)
    with serve_in_thread(config) as running:
        yield running


@pytest.fixture
def finished_run(tmp_path: Path, retrying_server: RunningServer, db_path: Path) -> str:
    """The run of `item_spec`, completed in the test's database; its workbench closed."""
    with Workbench.open() as wb:
        run_id = wb.runs.start(item_spec(tmp_path, retrying_server.openai_base_url))
        assert wb.runs.wait(run_id, timeout=60).status == "completed"
    return run_id
