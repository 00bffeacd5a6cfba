"""The public surface is what `__all__` says: sorted, complete, and importable."""

from __future__ import annotations

import importlib

import pytest

PACKAGES = [
    "promptlab",
    "promptlab.engine",
    "promptlab.providers",
    "promptlab.records",
    "promptlab.registry",
    "promptlab.store",
]


@pytest.mark.parametrize("name", PACKAGES)
def test_all_is_sorted_and_importable(name: str) -> None:
    module = importlib.import_module(name)
    exported = list(module.__all__)
    assert exported == sorted(exported)
    for member in exported:
        assert hasattr(module, member), f"{name}.__all__ names missing {member}"


def test_every_error_is_in_the_drawn_tree() -> None:
    import promptlab.errors as errors

    classes = [
        n for n, v in vars(errors).items()
        if isinstance(v, type) and issubclass(v, errors.PromptlabError)
    ]  # fmt: skip
    for name in classes:
        assert name in (errors.__doc__ or ""), f"{name} is not drawn in errors.py's docstring"
