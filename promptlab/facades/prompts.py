"""`wb.prompts`: versions, labels, references and diffs, with every change audited.

The registry (promptlab/prompts/registry.py) keeps the rules; this facade adds the
configured author and the audit trail's change events, and hands pages and commands
the registry's own read methods.
"""

from __future__ import annotations

from promptlab.facades.context import Context
from promptlab.prompts.create import create_prompt
from promptlab.prompts.files import PromptFile, export_prompt, import_prompt_file
from promptlab.prompts.registry import NO_VERSION, SaveResult
from promptlab.prompts.templates import Template
from promptlab.records import PromptVersion
from promptlab.records.prompts import GitSource, LabelledVersion, PromptHistory

__all__ = ["NO_VERSION", "Prompts"]


class Prompts:
    """Save, label, import and export prompt versions; read them back."""

    def __init__(self, context: Context) -> None:
        self._context = context
        self._registry = context.registry
        # Reads are the registry's own methods (their signatures and docstrings there);
        # only changes go through this facade's code, which adds the author and audit.
        registry = context.registry
        #: Whether no prompt is saved yet.
        self.is_empty = registry.is_empty
        #: The description of prompt `name`.
        self.description = registry.description
        #: Every version of `name`, newest first.
        self.versions = registry.versions
        #: Each label of `name` and the version it points at: `labels(name, versions=None)`.
        self.labels = registry.labels
        #: Label moves of `name`, newest first: `label_history(name, label=None)`.
        self.label_history = registry.label_history
        #: The version a reference names (`name`, `name@1.2.0`, `name@label`, a hash).
        self.resolve = registry.resolve
        #: Differences from version `ref_a` to `ref_b` of prompt `name`.
        self.diff = registry.diff
        #: Every prompt with its latest version, version count and labels.
        self.list = registry.list_prompts

    def labelled(self, ref: str) -> LabelledVersion:
        """The version `ref` names and the labels of its prompt pointing at it."""
        version = self._registry.resolve(ref)
        labels = self._registry.labels(version.prompt_name)
        return LabelledVersion(version, [k for k, v in labels.items() if v.id == version.id])

    def history(self, name: str) -> PromptHistory:
        """Every version of `name`, newest first, and the moves of its labels."""
        return PromptHistory(self._registry.versions(name), self._registry.label_history(name))

    # ---- changes (each one audited) ------------------------------------------------

    def create(
        self, name: str, template: Template, *, message: str = "", description: str = ""
    ) -> SaveResult:
        """Version 1.0.0 of a new prompt; see `promptlab.prompts.create.create_prompt`."""
        result = create_prompt(
            self._registry,
            name,
            template,
            author=self._context.author(),
            message=message,
            description=description,
        )
        self._context.audit_saved(result)
        return result

    def save_version(
        self, name: str, template: Template, *, message: str = "", version: str | None = None
    ) -> SaveResult:
        """A new version of an existing prompt, authored by the configured author."""
        result = self._registry.save_version(
            name, template, author=self._context.author(), message=message, version=version
        )
        self._context.audit_saved(result)
        return result

    def set_label(
        self, name: str, ref: str, label: str, *, expected: str | None = None
    ) -> PromptVersion:
        """Point `label` at version `ref`. `expected`: the version the mover saw the label
        at (`NO_VERSION`: no such label); a move on what has changed since is refused
        (StaleChangeError). None moves it whatever it points at."""
        version = self._registry.set_label(
            name, ref, label, actor=self._context.author(), expected=expected
        )
        self._context.audit_change(
            "label.moved",
            self._context.author(),
            {"prompt": name, "label": label, "version_id": version.id, "ref": version.ref},
        )
        return version

    def import_file(
        self, prompt: PromptFile, author: str | None = None, git: GitSource | None = None
    ) -> list[SaveResult]:
        """Save a checked prompt file's versions and labels (see `load_prompt_file`), with
        the commit the file was read at when it lay in a git work tree (`git_source`)."""
        results = import_prompt_file(self._registry, prompt, author or self._context.author(), git)
        for result in results:
            self._context.audit_saved(result, author)
        return results

    def export(self, name: str) -> str:
        """Every version and label of `name` as a prompt file (YAML)."""
        return export_prompt(self._registry, name)
