"""Creating a prompt: new names only; a repeated create is a no-op."""

from __future__ import annotations

import pytest

from promptlab.errors import PromptExistsError
from promptlab.prompts.create import create_prompt
from promptlab.prompts.registry import Registry
from promptlab.prompts.templates import Template


def template(text: str) -> Template:
    return Template.build([{"role": "user", "content": text}])


def test_a_new_name_is_created_with_its_description(registry: Registry) -> None:
    result = create_prompt(registry, "reply", template("{{ q }}"), author="a", description="d")
    assert (result.created, result.version.ref) == (True, "reply@1.0.0")
    assert registry.description("reply") == "d"


def test_the_same_content_again_saves_nothing_and_keeps_the_description(
    registry: Registry,
) -> None:
    first = create_prompt(registry, "reply", template("{{ q }}"), author="a", description="d")
    again = create_prompt(registry, "reply", template("{{ q }}"), author="b", description="new")
    assert (again.created, again.version.id) == (False, first.version.id)
    assert registry.description("reply") == "d"
    assert len(registry.versions("reply")) == 1


def test_other_content_under_an_existing_name_is_refused(registry: Registry) -> None:
    create_prompt(registry, "reply", template("{{ q }}"), author="a", description="d")
    with pytest.raises(PromptExistsError, match="'reply' already exists") as info:
        create_prompt(registry, "reply", template("Other {{ q }}"), author="a", description="")
    assert info.value.name == "reply"
    assert registry.description("reply") == "d"
    assert len(registry.versions("reply")) == 1
