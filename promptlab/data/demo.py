"""Demo content: the prompts, datasets and experiments in data/demo, loaded by
`init --demo` and the app's first start."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path

from promptlab.config import DEMO_DIR
from promptlab.data.datasets import DatasetStore
from promptlab.prompts.files import import_prompt_file, load_prompt_file
from promptlab.prompts.registry import Registry, SaveResult
from promptlab.records import DatasetInfo

DEMO_AUTHOR = "demo"
#: Demo datasets: name -> (file in the demo folder, unit column).
DEMO_DATASETS = {"tickets": ("tickets.csv", "customer_id")}
#: The experiment the app's first start runs on the demo dataset (`wb.demo.start_run`).
DEMO_EXPERIMENT = "triage-split"
DEMO_DATASET = "tickets"
#: How the demo run is scored: each ticket's category (the dataset's `category` column,
#: labelled by hand) against the category the model answered.
DEMO_SCORING = {
    "expected": "category",
    "scorers": [{"kind": "json_field", "name": "category", "path": "category"}],
}
#: Simulated click-through per variant of the demo run (others: DEFAULT_CLICK_THROUGH),
#: so the Compare page has a CTR effect to show on first start.
DEMO_CLICK_THROUGH = {"control": 0.15, "staging": 0.35}
DEFAULT_CLICK_THROUGH = 0.2
#: The `source` of the feedback the demo run records.
DEMO_FEEDBACK_SOURCE = "demo"


def demo_experiment_files(demo_dir: Path = DEMO_DIR) -> list[Path]:
    """The demo experiment files (added through the workbench: prompt refs get pinned)."""
    return sorted((demo_dir / "experiments").glob("*.yaml"))


def load_demo_prompts(registry: Registry, demo_dir: Path = DEMO_DIR) -> list[SaveResult]:
    """Import every demo prompt file; loading twice changes nothing."""
    results: list[SaveResult] = []
    for path in sorted(demo_dir.glob("*.yaml")):
        results.extend(import_prompt_file(registry, load_prompt_file(path), DEMO_AUTHOR))
    return results


def load_demo_datasets(datasets: DatasetStore, demo_dir: Path = DEMO_DIR) -> list[DatasetInfo]:
    """Import the demo datasets not yet in the store; returns those imported now.

    A dataset already there (even one changed since) is left as it is.
    """
    present = {info.name for info in datasets.list()}
    imported = []
    for name, (file, unit_column) in DEMO_DATASETS.items():
        if name not in present:
            imported.append(
                datasets.import_file(
                    demo_dir / file, name, unit_column=unit_column, author=DEMO_AUTHOR
                )
            )
    return imported


def demo_clicked(key: str, variant: str) -> bool:
    """Whether the simulated user clicked result `key`: a draw seeded by the key alone,
    so the same run always gets the same clicks."""
    draw = int(hashlib.sha256(f"demo-click:{key}".encode()).hexdigest()[:8], 16) / 2**32
    return draw < DEMO_CLICK_THROUGH.get(variant, DEFAULT_CLICK_THROUGH)


def demo_feedback_events(results: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """(key, kind) events for (key, variant) results: an impression each, and a click
    for those the simulated user clicked."""
    events: list[tuple[str, str]] = []
    for key, variant in results:
        events.append((key, "impression"))
        if demo_clicked(key, variant):
            events.append((key, "click"))
    return events
