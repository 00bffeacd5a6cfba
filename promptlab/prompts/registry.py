"""The prompt registry: immutable versions, semantic versions, movable labels, diffs.

A version's id is the hash of its canonical content, so the same content always has
the same id. References resolve as `name` (latest), `name@1.2.0`, `name@production`,
`name@sha256:<prefix>` or `name@git:<commit prefix>` (the version added from that
commit, promptlab/prompts/gitsource.py).
"""

from __future__ import annotations

import difflib
import functools
import json
import re
from dataclasses import replace
from typing import Any, Literal

from promptlab.errors import (
    NotFoundError,
    RegistryError,
    StaleChangeError,
    VersionError,
    moment,
)
from promptlab.prompts.templates import Template
from promptlab.records import LabelEvent, PromptVersion
from promptlab.records.prompts import (
    Bump,
    FieldChange,
    GitSource,
    MessageDiff,
    PromptSummary,
    SaveResult,
    VersionDiff,
)
from promptlab.store import Store
from promptlab.store.prompts import PromptStore

__all__ = [
    "FieldChange",
    "LabelEvent",
    "MessageDiff",
    "NO_VERSION",
    "PromptSummary",
    "PromptVersion",
    "Registry",
    "SaveResult",
    "VersionDiff",
    "bump_version",
    "classify_change",
    "diff_versions",
    "next_version",
    "parse_semver",
]

FIRST_VERSION = (1, 0, 0)
NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,79}$")
LABEL_PATTERN = re.compile(r"^[a-z][a-z0-9_-]{0,39}$")
SEMVER_PATTERN = re.compile(r"^(\d+)\.(\d+)\.(\d+)$")
#: Shortest hash prefix accepted in a reference, so typos rarely match by chance.
MIN_HASH_PREFIX = 4
COMMIT_PREFIX_PATTERN = re.compile(rf"^[0-9a-f]{{{MIN_HASH_PREFIX},64}}$")
RESERVED_LABELS = frozenset({"latest"})
#: What a label mover saw when the label did not exist yet (`set_label(expected=)`).
NO_VERSION = "none"


class Registry:
    """Prompts and their versions and labels; the rows are kept by a `PromptStore`."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.prompts = PromptStore(store)

    # ---- writing -------------------------------------------------------------------

    def save_version(
        self,
        name: str,
        template: Template,
        *,
        author: str,
        message: str = "",
        version: str | None = None,
        description: str | None = None,
        git: GitSource | None = None,
    ) -> SaveResult:
        """Save `template` as the next version of `name` (creating the prompt if new),
        with the commit it was added from (`git`), when it came from a git work tree.

        Identical content saves nothing and returns the existing version. It keeps the
        commit it was first added from, unless that add had uncommitted changes and this
        one has none: then this commit holds the content, and is recorded instead.
        """
        _check_name(name)
        version_id = template.content_hash()
        # One transaction: two saves at once cannot both take the same next number.
        with self.prompts.saving() as writes:
            now = self.store.clock.now()
            writes.ensure_prompt(name, description, now)
            existing = writes.version(name, version_id)
            if existing is not None:
                if git is not None and _better_source(existing.git, git):
                    writes.set_source(name, version_id, git, now)
                    existing = replace(existing, git=git)
                return SaveResult(existing, created=False, bump=None)
            latest = writes.latest(name)
            bump: Bump = classify_change(latest.template, template) if latest else "major"
            number = next_version(latest.semver if latest else None, bump, version)
            semver = ".".join(map(str, number))
            saved = PromptVersion(
                name,
                version_id,
                semver,
                template,
                author,
                message,
                now,
                latest.id if latest else None,
                git,
            )
            writes.add_version(saved, number)
            if git is not None:
                writes.set_source(name, version_id, git, now)
        return SaveResult(saved, created=True, bump=bump)

    def set_label(
        self, name: str, ref: str, label: str, *, actor: str, expected: str | None = None
    ) -> PromptVersion:
        """Point `label` at the version `ref` names; the move is kept in the label's history.

        `expected` is the version (semver or hash) the mover saw the label point at, or
        `NO_VERSION` when they saw no such label: a move made on what has changed since
        is refused with a StaleChangeError naming who moved the label and when. None
        moves it whatever it points at now.
        """
        if not LABEL_PATTERN.match(label) or label in RESERVED_LABELS:
            raise RegistryError(
                f"label {label!r} is not allowed: use lowercase letters, digits, '-' or '_', "
                "starting with a letter, and not 'latest'"
            )
        target = self.resolve(_qualify(name, ref))
        check = None
        if expected is not None:
            seen = None if expected == NO_VERSION else self.resolve(_qualify(name, expected))
            check = functools.partial(_check_label, f"{name}@{label}", seen)
        self.prompts.move_label(
            name, label, target.id, actor=actor, at=self.store.clock.now(), check=check
        )
        return target

    # ---- reading -------------------------------------------------------------------

    def is_empty(self) -> bool:
        return self.prompts.prompt_count() == 0

    def list_prompts(self) -> list[PromptSummary]:
        counts = self.prompts.version_counts()
        summaries = []
        for name, description in self.prompts.prompts():
            if not counts.get(name):
                continue
            versions = self.versions(name)  # read once: latest and labels both come from it
            summaries.append(
                PromptSummary(
                    name=name,
                    description=description,
                    latest=versions[0],
                    version_count=len(versions),
                    labels={k: v.semver for k, v in self.labels(name, versions).items()},
                )
            )
        return summaries

    def description(self, name: str) -> str:
        description = self.prompts.description(name)
        if description is None:
            raise NotFoundError(f"no prompt named {name!r}")
        return description

    def versions(self, name: str) -> list[PromptVersion]:
        """Every version of `name`, newest first."""
        versions = self.prompts.versions(name)
        if not versions:
            raise NotFoundError(f"no prompt named {name!r}")
        return versions

    def labels(
        self, name: str, versions: list[PromptVersion] | None = None
    ) -> dict[str, PromptVersion]:
        """Each label of `name` and the version it points at now.

        Pass `versions` (from `versions(name)`) when you have them, to skip reading them again.
        """
        rows = self.prompts.current_labels(name)
        if not rows:
            return {}
        by_id = {v.id: v for v in (versions if versions is not None else self.versions(name))}
        return {label: by_id[version_id] for label, version_id in rows}

    def label_history(self, name: str, label: str | None = None) -> list[LabelEvent]:
        """Label moves of `name`, newest first."""
        return self.prompts.label_history(name, label)

    def resolve(self, ref: str) -> PromptVersion:
        """The version a reference names; NotFoundError says what was missing."""
        name, _, selector = ref.partition("@")
        versions = self.versions(name)
        if not selector or selector == "latest":
            return versions[0]
        if selector.startswith("git:"):
            return _by_commit(ref, selector.removeprefix("git:"), versions)
        if selector.startswith("sha256:"):
            if len(selector) < len("sha256:") + MIN_HASH_PREFIX:
                raise RegistryError(
                    f"{ref}: give at least {MIN_HASH_PREFIX} hex digits after 'sha256:'"
                )
            matches = [v for v in versions if v.id.startswith(selector)]
            if len(matches) > 1:
                found = ", ".join(v.semver for v in matches)
                raise RegistryError(f"{ref}: prefix matches several versions ({found})")
            if matches:
                return matches[0]
            raise NotFoundError(f"{ref}: no version of {name!r} has that hash")
        if SEMVER_PATTERN.match(selector):
            for v in versions:
                if v.semver == selector:
                    return v
            known = ", ".join(v.semver for v in versions)
            raise NotFoundError(f"{ref}: no such version (known: {known})")
        labels = self.labels(name, versions)
        if selector in labels:
            return labels[selector]
        known = ", ".join(labels) or "none"
        raise NotFoundError(f"{ref}: no version, hash or label {selector!r} (labels: {known})")

    def diff(self, name: str, ref_a: str, ref_b: str) -> VersionDiff:
        """Differences from version `ref_a` to `ref_b` of prompt `name`."""
        return diff_versions(
            self.resolve(_qualify(name, ref_a)), self.resolve(_qualify(name, ref_b))
        )


def _better_source(known: GitSource | None, new: GitSource) -> bool:
    """Whether `new` should replace the commit recorded for a version (`known`)."""
    return known is None or (known.dirty and not new.dirty)


def _by_commit(ref: str, prefix: str, versions: list[PromptVersion]) -> PromptVersion:
    """The newest version added from the commit `prefix` starts (a prompt file holds
    several): of those whose file was as committed, else of those added with
    uncommitted changes on top of it."""
    if not COMMIT_PREFIX_PATTERN.match(prefix):
        raise RegistryError(
            f"{ref}: give at least {MIN_HASH_PREFIX} hex digits of a commit after 'git:'"
        )
    matches = [v for v in versions if v.git is not None and v.git.commit.startswith(prefix)]
    commits = sorted({v.git.commit[:12] for v in matches if v.git is not None})
    if len(commits) > 1:
        raise RegistryError(f"{ref}: the prefix matches several commits ({', '.join(commits)})")
    if not matches:
        name = ref.partition("@")[0]
        raise NotFoundError(f"{ref}: no version of {name!r} was added from that commit")
    clean = [v for v in matches if v.git is not None and not v.git.dirty]
    return (clean or matches)[0]  # versions come newest first


def _check_label(where: str, seen: PromptVersion | None, now: LabelEvent | None) -> None:
    """Refuse a move of label `where` when it no longer points where its mover saw it."""
    if (now.version_id if now else None) == (seen.id if seen else None):
        return
    saw = f"you saw it at {seen.semver}" if seen else "you saw no such label"
    if now is None:
        raise StaleChangeError(
            f"{where} does not exist, but {saw}; look again before moving it",
            changed_by=None,
            changed_at=None,
        )
    raise StaleChangeError(
        f"{where} was moved to {now.semver} by {now.actor} at {moment(now.moved_at)}, but "
        f"{saw}; look again before moving it",
        changed_by=now.actor,
        changed_at=now.moved_at,
    )


def classify_change(old: Template, new: Template) -> Bump:
    """major: the variable contract, output schema or rules changed; minor: message text;
    patch: params."""
    if (
        old.variables != new.variables
        or old.output_schema != new.output_schema
        or old.rules != new.rules  # the output contract, like the schema
    ):
        return "major"
    if old.messages != new.messages:
        return "minor"
    return "patch"


def diff_versions(a: PromptVersion, b: PromptVersion) -> VersionDiff:
    """Message line diffs, param changes, variable changes and output-schema lines."""
    messages: list[MessageDiff] = []
    ma, mb = a.template.messages, b.template.messages
    for index in range(max(len(ma), len(mb))):
        old = ma[index] if index < len(ma) else None
        new = mb[index] if index < len(mb) else None
        old_text = old.content.splitlines() if old else []
        new_text = new.content.splitlines() if new else []
        lines = [
            line.rstrip("\n") for line in difflib.unified_diff(old_text, new_text, lineterm="", n=2)
        ][2:]  # drop the ---/+++ header; the caller prints its own
        if old is None:
            status: Literal["same", "changed", "added", "removed"] = "added"
        elif new is None:
            status = "removed"
        elif old == new:
            status = "same"
        else:
            status = "changed"
        messages.append(
            MessageDiff(index, status, old.role if old else None, new.role if new else None, lines)
        )
    params = [
        FieldChange(key, a.template.params.get(key), b.template.params.get(key))
        for key in sorted(set(a.template.params) | set(b.template.params))
        if a.template.params.get(key) != b.template.params.get(key)
    ]
    props_a = a.template.variables.get("properties", {})
    props_b = b.template.variables.get("properties", {})
    req_a = set(a.template.variables.get("required", []))
    req_b = set(b.template.variables.get("required", []))
    variables = []
    for key in sorted(set(props_a) | set(props_b)):
        before = _variable_view(props_a.get(key), key in req_a)
        after = _variable_view(props_b.get(key), key in req_b)
        if before != after:
            variables.append(FieldChange(key, before, after))
    schema_lines = list(
        difflib.unified_diff(
            _pretty(a.template.output_schema), _pretty(b.template.output_schema), lineterm="", n=2
        )
    )[2:]
    return VersionDiff(a, b, messages, params, variables, schema_lines)


def _variable_view(schema: dict[str, Any] | None, required: bool) -> dict[str, Any] | None:
    return None if schema is None else {**schema, "required": required}


def _pretty(schema: Any) -> list[str]:
    return [] if schema is None else json.dumps(schema, indent=2, sort_keys=True).splitlines()


def _qualify(name: str, ref: str) -> str:
    """`1.2.0` -> `name@1.2.0`; a full reference to the same prompt is accepted too."""
    if "@" in ref:
        other = ref.split("@", 1)[0]
        if other != name:
            raise RegistryError(f"reference {ref!r} names prompt {other!r}, not {name!r}")
        return ref
    return f"{name}@{ref}"


def _check_name(name: str) -> None:
    if not NAME_PATTERN.match(name):
        raise RegistryError(
            f"prompt name {name!r} is not allowed: use lowercase letters, digits, '.', '-' or "
            "'_' (starting with a letter or digit, at most 80 characters)"
        )


def parse_semver(text: str) -> tuple[int, int, int]:
    match = SEMVER_PATTERN.match(text.strip())
    if not match:
        raise VersionError(f"version {text!r} is not a semantic version like 1.2.0")
    major, minor, patch = (int(g) for g in match.groups())
    return major, minor, patch


def bump_version(current: tuple[int, int, int], bump: Bump) -> tuple[int, int, int]:
    major, minor, patch = current
    if bump == "major":
        return major + 1, 0, 0
    if bump == "minor":
        return major, minor + 1, 0
    return major, minor, patch + 1


def next_version(latest: str | None, bump: Bump, override: str | None) -> tuple[int, int, int]:
    """The number a new version gets: the automatic bump, or a higher `override`."""
    automatic = bump_version(parse_semver(latest), bump) if latest else FIRST_VERSION
    if override is None:
        return automatic
    wanted = parse_semver(override)
    if wanted < automatic:
        auto = ".".join(map(str, automatic))
        raise VersionError(
            f"version {override} is lower than the automatic {bump} bump to {auto}; "
            "a version may only be raised"
        )
    return wanted
