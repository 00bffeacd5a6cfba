"""Demo content: the prompts, datasets and experiments in data/demo, loaded by
`init --demo` and the app's first start."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

from promptlab.config import DEMO_DIR
from promptlab.data.datasets import DatasetStore
from promptlab.prompts.files import import_prompt_file, load_prompt_file
from promptlab.prompts.registry import Registry, SaveResult
from promptlab.providers.simulator import FAULT_TRUNCATED, simulate_feedback
from promptlab.records import DatasetInfo
from promptlab.store.feedback import ShownResult

DEMO_AUTHOR = "demo"
#: Demo datasets: name -> (file in the demo folder, unit column). `customers` is the
#: traffic the demo experiment runs on: 400 customers writing 800 of the hand-labelled
#: tickets in their own words (promptlab/data/demo_customers.py makes it).
DEMO_DATASETS = {
    "tickets": ("tickets.csv", "customer_id"),
    "customers": ("customers.csv", "customer_id"),
}
#: The experiment the app's first start runs on the demo dataset (`wb.demo.start_run`):
#: 400 customers split 70/30, enough units per arm for a first look with a verdict.
DEMO_EXPERIMENT = "triage-split"
DEMO_DATASET = "customers"
#: How the demo run is scored: each ticket's category (the dataset's `category` column,
#: labelled by hand) against the category the model answered.
DEMO_SCORING = {
    "expected": "category",
    "scorers": [{"kind": "json_field", "name": "category", "path": "category"}],
}
#: Seeds the simulated users' clicks: the same run always gets the same clicks.
DEMO_CLICK_SEED = 2026
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


def demo_feedback_events(
    results: Iterable[ShownResult], messages_of: Callable[[str], list[dict[str, str]]]
) -> list[tuple[str, str]]:
    """(key, kind) events for a run's results: an impression each, and a click when the
    simulated user clicked it: the simulator's click model (providers/simulator.py:
    the model's base rate, the prompt version's quality from `messages_of` its id, the
    answer's length, a cut-off answer), drawn once per result key."""
    events: list[tuple[str, str]] = []
    for shown in results:
        events.append((shown.key, "impression"))
        fault = FAULT_TRUNCATED if shown.finish_reason == "length" else None
        clicked = simulate_feedback(
            shown.model,
            shown.output_text,
            shown.key,
            seed=DEMO_CLICK_SEED,
            prompt_messages=messages_of(shown.prompt_version_id),
            fault=fault,
        )
        if clicked:
            events.append((shown.key, "click"))
    return events
