"""Demo content: the prompts in data/demo, loaded by `init --demo` and the app's first start."""

from __future__ import annotations

from pathlib import Path

from promptlab.config import DEMO_DIR
from promptlab.promptfiles import import_prompt_file, load_prompt_file
from promptlab.registry import Registry, SaveResult

DEMO_AUTHOR = "demo"


def load_demo_prompts(registry: Registry, demo_dir: Path = DEMO_DIR) -> list[SaveResult]:
    """Import every demo prompt file; loading twice changes nothing."""
    results: list[SaveResult] = []
    for path in sorted(demo_dir.glob("*.yaml")):
        results.extend(import_prompt_file(registry, load_prompt_file(path), DEMO_AUTHOR))
    return results
