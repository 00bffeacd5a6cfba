"""Creating a prompt: a new name only; the same content again is a no-op, not a version."""

from __future__ import annotations

from promptlab.errors import NotFoundError, PromptExistsError
from promptlab.prompts.registry import Registry, SaveResult
from promptlab.prompts.templates import Template


def create_prompt(
    registry: Registry,
    name: str,
    template: Template,
    *,
    author: str,
    message: str = "",
    description: str = "",
) -> SaveResult:
    """Save `template` as version 1.0.0 of a new prompt `name`.

    If `name` exists and one of its versions has this exact content, nothing is saved
    and that version comes back with `created=False` (a repeated create). Any other
    content under an existing name raises PromptExistsError: changing a prompt is
    saving a new version of it, which keeps its description and history intact.
    """
    try:
        versions = registry.versions(name.strip())
    except NotFoundError:
        return registry.save_version(
            name.strip(), template, author=author, message=message, description=description
        )
    content_id = template.content_hash()
    for version in versions:
        if version.id == content_id:
            return SaveResult(version, created=False, bump=None)
    raise PromptExistsError(name.strip(), versions[0].ref)
