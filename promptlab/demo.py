"""Demo content: the prompts, datasets and experiments in data/demo, loaded by
`init --demo` and the app's first start."""

from __future__ import annotations

from pathlib import Path

from promptlab.config import DEMO_DIR
from promptlab.datasets import DatasetStore
from promptlab.promptfiles import import_prompt_file, load_prompt_file
from promptlab.records import DatasetInfo
from promptlab.registry import Registry, SaveResult

DEMO_AUTHOR = "demo"
#: Demo datasets: name -> (file in the demo folder, unit column).
DEMO_DATASETS = {"tickets": ("tickets.csv", "customer_id")}
#: The experiment the app's first start runs on the demo dataset (Workbench.start_demo_run).
DEMO_EXPERIMENT = "triage-split"
DEMO_DATASET = "tickets"


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
