"""Prompt versions, label moves, saves and diffs: the registry's records (plain data,
which a server's typed answers carry to the CLI as they are)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from promptlab.prompts.templates import Template


@dataclass(frozen=True)
class GitSource:
    """The git commit a version was added from (promptlab/prompts/gitsource.py)."""

    #: The full commit id checked out (HEAD) when the file was added.
    commit: str
    #: True when the file differed from that commit (edited, staged or untracked).
    dirty: bool
    #: The file's path inside its repository.
    path: str

    @property
    def short(self) -> str:
        """The commit's first 7 hex digits, `+` when the file had uncommitted changes."""
        return self.commit[:7] + ("+" if self.dirty else "")


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
    #: The commit the version was first added from; None when it came from no git work tree.
    git: GitSource | None = None

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


Bump = Literal["major", "minor", "patch"]


@dataclass(frozen=True)
class PromptSummary:
    name: str
    description: str
    latest: PromptVersion
    version_count: int
    labels: dict[str, str]  # label -> semver


@dataclass(frozen=True)
class SaveResult:
    version: PromptVersion
    created: bool
    bump: Bump | None

    def describe(self) -> str:
        v = self.version
        if not self.created:
            return f"no changes: content is identical to {v.ref} ({v.short_id})"
        return f"saved {v.ref} ({v.short_id}, {self.bump} bump)"


@dataclass(frozen=True)
class FieldChange:
    field: str
    before: Any
    after: Any


@dataclass(frozen=True)
class MessageDiff:
    index: int
    status: Literal["same", "changed", "added", "removed"]
    role_a: str | None
    role_b: str | None
    lines: list[str]


@dataclass(frozen=True)
class VersionDiff:
    a: PromptVersion
    b: PromptVersion
    messages: list[MessageDiff]
    params: list[FieldChange]
    variables: list[FieldChange]
    output_schema: list[str]

    @property
    def is_empty(self) -> bool:
        return (
            all(m.status == "same" for m in self.messages)
            and not self.params
            and not self.variables
            and not self.output_schema
        )

    def to_text(self) -> str:
        """A readable, unified-diff style rendering (what `prompt diff` prints)."""
        out = [f"--- {self.a.ref} ({self.a.short_id})", f"+++ {self.b.ref} ({self.b.short_id})"]
        if self.is_empty:
            out.append("(no differences)")
        for m in self.messages:
            if m.status == "same":
                continue
            roles = m.role_a if m.role_a == m.role_b else f"{m.role_a} -> {m.role_b}"
            out.append(f"@@ messages[{m.index}] ({roles}) {m.status} @@")
            out.extend(m.lines)
        for title, changes in (("params", self.params), ("variables", self.variables)):
            for c in changes:
                out.append(f"@@ {title}.{c.field} @@")
                out.append(f"-{_show(c.before)}")
                out.append(f"+{_show(c.after)}")
        if self.output_schema:
            out.append("@@ output_schema @@")
            out.extend(self.output_schema)
        return "\n".join(out)


@dataclass(frozen=True)
class LabelledVersion:
    """The version a reference names and the labels pointing at it (`prompt show`)."""

    version: PromptVersion
    labels: list[str]


@dataclass(frozen=True)
class PromptHistory:
    """Every version of a prompt, newest first, and its label moves (`prompt history`)."""

    versions: list[PromptVersion]
    moves: list[LabelEvent]


@dataclass(frozen=True)
class DemoLoaded:
    """What loading the demo through a server did: the demo prompts' saves, and the
    demo run it started (None when the database already had runs)."""

    results: list[SaveResult]
    run_id: str | None


def _show(value: Any) -> str:
    return "(none)" if value is None else json.dumps(value, sort_keys=True)
