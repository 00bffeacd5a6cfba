"""The public surface is what `__all__` says: sorted, complete, importable, documented."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

import promptlab

PACKAGES = [
    "promptlab",
    "promptlab.engine",
    "promptlab.providers",
    "promptlab.records",
    "promptlab.prompts.registry",
    "promptlab.store",
]
#: The docs' Python API page (docs/reference/api.md), under its "## From Python" heading.
API_PAGE = Path(__file__).resolve().parent.parent / "docs" / "reference" / "api.md"
#: Adding or removing a public name is a decision: change this list and the API page.
PUBLIC = [
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


@pytest.mark.parametrize("name", PACKAGES)
def test_all_is_sorted_and_importable(name: str) -> None:
    module = importlib.import_module(name)
    exported = list(module.__all__)
    assert exported == sorted(exported)
    for member in exported:
        assert hasattr(module, member), f"{name}.__all__ names missing {member}"


def test_the_public_surface_is_exactly_the_documented_one() -> None:
    assert promptlab.__all__ == PUBLIC


def from_python_section() -> str:
    text = API_PAGE.read_text(encoding="utf-8")
    return text.split("## From Python", 1)[1].split("\n## ", 1)[0]


@pytest.mark.parametrize("name", PUBLIC)
def test_every_public_name_is_in_the_api_page(name: str) -> None:
    assert f"`{name}`" in from_python_section(), f"docs/reference/api.md omits {name}"


def test_the_api_page_python_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    example = from_python_section().split("```python\n", 1)[1].split("```", 1)[0]
    exec(compile(example, str(API_PAGE), "exec"), {})
    assert "Summarize a long article" in capsys.readouterr().out


def test_every_error_is_in_the_drawn_tree() -> None:
    import promptlab.errors as errors

    classes = [
        n
        for n, v in vars(errors).items()
        if isinstance(v, type) and issubclass(v, errors.PromptlabError)
    ]
    for name in classes:
        assert name in (errors.__doc__ or ""), f"{name} is not drawn in errors.py's docstring"
