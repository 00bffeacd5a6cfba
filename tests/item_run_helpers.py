"""A run worth opening item by item: two variants over fakellm, retries, one invalid row.

Shared by the item read-model, CLI and Runs page tests.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from promptlab.engine import RunSpec, parse_spec

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
