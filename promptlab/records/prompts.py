"""Prompt versions and label moves, as the registry reads them back."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from promptlab.prompts.templates import Template


@dataclass(frozen=True)
class PromptVersion:
    prompt_name: str
    id: str
    semver: str
    template: Template
    author: str
    message: str
    created_at: datetime
    parent_id: str | None

    @property
    def short_id(self) -> str:
        """`sha256:` and the first 12 hex digits: enough to tell versions apart."""
        return self.id[:19]

    @property
    def ref(self) -> str:
        return f"{self.prompt_name}@{self.semver}"


@dataclass(frozen=True)
class LabelEvent:
    prompt_name: str
    label: str
    version_id: str
    semver: str
    moved_at: datetime
    actor: str
