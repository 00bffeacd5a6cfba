"""The YAML prompt file: a git-friendly home for one prompt and its versions.

    name: ticket-triage                 # required
    description: Route support tickets  # optional
    labels: {production: 1.1.0}         # optional: label -> version in this file
    versions:                           # oldest first
      - version: 1.0.0                  # optional: checked, or bumped automatically
        message: First version          # the commit message
        author: alice                   # optional (defaults to PROMPTLAB_AUTHOR)
        params: {model: sim:careful, temperature: 0.2, max_tokens: 300}
        variables: {ticket: {type: string, maxLength: 4000}}
        output_schema: {type: object, ...}
        messages:
          - role: system
            content: |
              You are ...

A file with a single version may put `messages`, `params`, `variables`,
`output_schema`, `message` and `version` at the top level instead of `versions`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from promptlab.errors import (
    NotFoundError,
    PromptFileError,
    PromptlabError,
    RegistryError,
    VersionError,
)
from promptlab.prompts.registry import (
    LABEL_PATTERN,
    RESERVED_LABELS,
    Registry,
    SaveResult,
    classify_change,
    next_version,
)
from promptlab.prompts.templates import Template
from promptlab.records.prompts import GitSource
from promptlab.yamlio import parse_yaml, read_yaml

_VERSION_KEYS = {
    "version",
    "message",
    "author",
    "params",
    "variables",
    "output_schema",
    "rules",
    "drift_threshold",
    "messages",
}
_TOP_KEYS = {"name", "description", "labels", "versions"} | _VERSION_KEYS


@dataclass(frozen=True)
class VersionSpec:
    template: Template
    message: str = ""
    author: str | None = None
    version: str | None = None


@dataclass(frozen=True)
class PromptFile:
    name: str
    description: str
    versions: list[VersionSpec]
    labels: dict[str, str] = field(default_factory=dict)
    source: str = "<prompt>"


def load_prompt_file(path: str | Path) -> PromptFile:
    """Read and fully check a prompt file; errors name the file and the field."""
    data = read_yaml(path, error=PromptFileError)
    return parse_prompt_data(data, source=str(path))


def parse_prompt_data(data: Any, source: str = "<prompt>") -> PromptFile:
    if not isinstance(data, dict):
        raise PromptFileError(f"{source}: expected a mapping with name and messages or versions")
    unknown = sorted(set(data) - _TOP_KEYS)
    if unknown:
        raise PromptFileError(f"{source}: unknown field(s) {', '.join(unknown)}")
    name = _string_field(data, "name", source)
    if name is None:
        raise PromptFileError(f"{source}: field 'name' is required")
    if not name:
        raise PromptFileError(f"{source}: field 'name' must not be empty")
    if "versions" in data:
        stray = sorted(set(data) & _VERSION_KEYS)
        if stray:
            raise PromptFileError(
                f"{source}: {', '.join(stray)} must go inside versions[] when versions is given"
            )
        raw_versions = data["versions"]
        if not isinstance(raw_versions, list) or not raw_versions:
            raise PromptFileError(f"{source}: field 'versions' must be a non-empty list")
        prefixes = [f"versions[{i}]" for i in range(len(raw_versions))]
    else:
        raw_versions = [{k: v for k, v in data.items() if k in _VERSION_KEYS}]
        prefixes = ["(top level)"]
    versions = [
        _parse_version(item, f"{source}: {prefix}")
        for item, prefix in zip(raw_versions, prefixes, strict=True)
    ]
    labels = data.get("labels") or {}
    if not isinstance(labels, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in labels.items()
    ):
        raise PromptFileError(f"{source}: field 'labels' must map label names to versions")
    description = _string_field(data, "description", source) or ""
    return PromptFile(name, description, versions, labels, source)


def _string_field(data: dict[str, Any], key: str, where: str) -> str | None:
    """The text of an optional field; a number, list or mapping there is an error."""
    value = data.get(key)
    if value is not None and not isinstance(value, str):
        raise PromptFileError(f"{where}: field {key!r} must be a string, got {value!r:.40}")
    return value


def _parse_version(item: Any, where: str) -> VersionSpec:
    if not isinstance(item, dict):
        raise PromptFileError(f"{where}: expected a mapping")
    unknown = sorted(set(item) - _VERSION_KEYS)
    if unknown:
        raise PromptFileError(f"{where}: unknown field(s) {', '.join(unknown)}")
    if not isinstance(item.get("messages"), list):
        raise PromptFileError(f"{where}: field 'messages' must be a list of role/content")
    version = item.get("version")
    message = _string_field(item, "message", where) or ""
    author = _string_field(item, "author", where)
    try:
        template = Template.build(
            item["messages"],
            params=item.get("params"),
            variables=item.get("variables"),
            output_schema=item.get("output_schema"),
            rules=item.get("rules"),
            drift_threshold=item.get("drift_threshold"),
        )
    except PromptlabError as exc:
        raise PromptFileError(f"{where}: {exc}") from exc
    return VersionSpec(
        template=template,
        message=message,
        author=author,
        version=str(version) if version is not None else None,
    )


def import_prompt_file(
    registry: Registry, prompt: PromptFile, author: str, git: GitSource | None = None
) -> list[SaveResult]:
    """Save each version in order (identical ones are skipped), then move the labels,
    all as `author` (the caller); each new version records the commit the file was
    read at (`git`), when it lay in a git work tree.

    Version numbers and label targets are checked against the registry first, so a file
    that cannot be imported whole saves nothing.
    """
    check_importable(registry, prompt)
    results: list[SaveResult] = []
    by_file_version: dict[str, str] = {}
    for spec in prompt.versions:
        # Who adds a version is the caller, whatever a file says: its `author:` is kept
        # as a note in the message, never recorded as the author.
        claimed = spec.author if spec.author and spec.author != author else None
        note = f"(the file names {claimed} as its author)" if claimed else ""
        result = registry.save_version(
            prompt.name,
            spec.template,
            author=author,
            message=" ".join(part for part in (spec.message, note) if part),
            version=spec.version,
            description=prompt.description or None,
            git=git,
        )
        results.append(result)
        if spec.version:
            by_file_version[spec.version] = result.version.semver
    for label, ref in prompt.labels.items():
        registry.set_label(prompt.name, by_file_version.get(ref, ref), label, actor=author)
    return results


def check_importable(registry: Registry, prompt: PromptFile) -> None:
    """Walk the file's versions as `save_version` would; raise naming the first bad field."""
    try:
        existing = registry.versions(prompt.name)
    except NotFoundError:
        existing = []
    known = {v.id for v in existing}
    latest = existing[0] if existing else None
    semver, template = (latest.semver, latest.template) if latest else (None, None)
    file_versions: set[str] = set()
    for index, spec in enumerate(prompt.versions):
        content_id = spec.template.content_hash()
        if content_id in known:
            continue  # identical content: nothing is saved, its number stands
        bump = classify_change(template, spec.template) if template else "major"
        try:
            number = next_version(semver, bump, spec.version)
        except VersionError as exc:
            raise PromptFileError(f"{prompt.source}: versions[{index}].version: {exc}") from exc
        semver, template = ".".join(map(str, number)), spec.template
        known.add(content_id)
        file_versions.add(semver)
        if spec.version:
            file_versions.add(spec.version)
    for label, ref in prompt.labels.items():
        if not LABEL_PATTERN.match(label) or label in RESERVED_LABELS:
            raise PromptFileError(
                f"{prompt.source}: labels.{label}: use lowercase letters, digits, '-' or '_', "
                "starting with a letter, and not 'latest'"
            )
        if ref in file_versions:
            continue
        try:
            registry.resolve(f"{prompt.name}@{ref}")
        except NotFoundError as exc:
            raise PromptFileError(
                f"{prompt.source}: labels.{label}: {ref!r} is neither a version in this file "
                "nor one already saved"
            ) from exc
        except RegistryError as exc:
            raise PromptFileError(f"{prompt.source}: labels.{label}: {exc}") from exc


def export_prompt(registry: Registry, name: str) -> str:
    """The prompt file text for `name`: every version, oldest first, and current labels."""
    versions = list(reversed(registry.versions(name)))
    doc: dict[str, Any] = {"name": name}
    description = registry.description(name)
    if description:
        doc["description"] = description
    labels = {label: v.semver for label, v in registry.labels(name).items()}
    if labels:
        doc["labels"] = labels
    doc["versions"] = [_version_doc(v.semver, v.message, v.author, v.template) for v in versions]
    return yaml.dump(doc, Dumper=_BlockDumper, sort_keys=False, allow_unicode=True, width=100)


def _version_doc(semver: str, message: str, author: str, template: Template) -> dict[str, Any]:
    doc: dict[str, Any] = {"version": semver, "message": message, "author": author}
    doc["params"] = dict(template.params)
    variables = template.variable_refinements()
    if variables:
        doc["variables"] = variables
    if template.output_schema is not None:
        doc["output_schema"] = template.output_schema
    if template.rules:
        doc["rules"] = [dict(r) for r in template.rules]
    if template.drift_threshold is not None:
        doc["drift_threshold"] = template.drift_threshold
    doc["messages"] = [{"role": m.role, "content": m.content} for m in template.messages]
    return doc


class _BlockDumper(yaml.SafeDumper):
    """Multi-line text as `|` blocks, so diffs of prompt files read line by line."""


def _str_representer(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_BlockDumper.add_representer(str, _str_representer)


def parse_yaml_mapping(text: str, field_name: str) -> dict[str, Any] | None:
    """A YAML (or JSON) mapping typed into a form field; empty text means none."""
    if not text.strip():
        return None
    data = parse_yaml(text, where=field_name, error=PromptFileError)
    if data is None:
        return None
    if not isinstance(data, dict):
        raise PromptFileError(f"{field_name}: expected a mapping, got {type(data).__name__}")
    return data


def dump_yaml_mapping(data: Any) -> str:
    """The text a form shows for a mapping (variables, output schema)."""
    if not data:
        return ""
    return yaml.dump(data, Dumper=_BlockDumper, sort_keys=False, allow_unicode=True, width=100)
