"""promptlab: versioned prompts, A/B batches through one rate-limit-aware executor, DuckDB."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from promptlab.config import Settings
from promptlab.errors import (
    ErrorKind,
    PromptlabError,
    ProviderError,
    VariableError,
)

if TYPE_CHECKING:
    from promptlab.experiments import (
        Assignment,
        ExperimentConfig,
        assign,
        load_experiment_config,
    )
    from promptlab.prompts.registry import PromptVersion, Registry
    from promptlab.prompts.templates import Message, Template
    from promptlab.store import Store

#: Public names loaded on first use: importing them pulls in DuckDB, pyarrow, jinja2 and
#: jsonschema, which `promptlab --help` and every CLI start would otherwise pay for.
_LAZY = {
    # Experiments: `promptlab.assign(promptlab.load_experiment_config(FILE), unit_id)` in
    # a live service, on an exported config, with no database (promptlab/experiments/).
    "Assignment": "promptlab.experiments",
    "ExperimentConfig": "promptlab.experiments",
    "assign": "promptlab.experiments",
    "load_experiment_config": "promptlab.experiments",
    "Message": "promptlab.prompts.templates",
    "PromptVersion": "promptlab.prompts.registry",
    "Registry": "promptlab.prompts.registry",
    "Store": "promptlab.store",
    "Template": "promptlab.prompts.templates",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'promptlab' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


__all__ = [
    "Assignment",
    "ErrorKind",
    "ExperimentConfig",
    "Message",
    "PromptVersion",
    "PromptlabError",
    "ProviderError",
    "Registry",
    "Settings",
    "Store",
    "Template",
    "VariableError",
    "assign",
    "load_experiment_config",
]
