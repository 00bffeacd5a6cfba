from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from promptlab.errors import NotFoundError, RegistryError, VersionError
from promptlab.prompts.registry import Registry, classify_change
from promptlab.prompts.templates import Template
from promptlab.store import Store


def template(text: str = "Summarize {{ article }}", **kwargs: Any) -> Template:
    return Template.build(
        [{"role": "system", "content": "You are terse."}, {"role": "user", "content": text}],
        **kwargs,
    )


def test_first_save_is_1_0_0_and_identical_content_creates_nothing(registry: Registry) -> None:
    first = registry.save_version("summ", template(), author="ann", message="first")
    assert first.created and first.version.semver == "1.0.0"
    assert first.version.id.startswith("sha256:")
    again = registry.save_version("summ", template(), author="bob", message="again")
    assert not again.created
    assert again.version.id == first.version.id
    assert "no changes" in again.describe()
    assert len(registry.versions("summ")) == 1


@pytest.mark.parametrize(
    ("change", "bump", "expected"),
    [
        ({"params": {"temperature": 0.1}}, "patch", "1.0.1"),
        ({"text": "Summarize briefly: {{ article }}"}, "minor", "1.1.0"),
        ({"text": "Summarize {{ article }} for {{ audience }}"}, "major", "2.0.0"),
        ({"variables": {"article": {"maxLength": 100}}}, "major", "2.0.0"),
        ({"output_schema": {"type": "object"}}, "major", "2.0.0"),
    ],
)
def test_bump_rules(registry: Registry, change: dict[str, Any], bump: str, expected: str) -> None:
    registry.save_version("summ", template(), author="ann")
    text = change.pop("text", "Summarize {{ article }}")
    new = template(text, **change)
    assert classify_change(registry.resolve("summ").template, new) == bump
    result = registry.save_version("summ", new, author="ann")
    assert (result.bump, result.version.semver) == (bump, expected)
    assert result.version.parent_id == registry.resolve("summ@1.0.0").id


def test_version_override_may_only_go_up(registry: Registry) -> None:
    registry.save_version("summ", template(), author="ann")
    with pytest.raises(VersionError, match="lower than the automatic minor bump to 1.1.0"):
        registry.save_version("summ", template("v2 {{ article }}"), author="a", version="1.0.5")
    assert len(registry.versions("summ")) == 1  # nothing half-saved
    up = registry.save_version("summ", template("v2 {{ article }}"), author="a", version="3.0.0")
    assert up.version.semver == "3.0.0"
    with pytest.raises(VersionError, match="not a semantic version"):
        registry.save_version("summ", template("v3 {{ article }}"), author="a", version="v4")


def test_hash_is_stable_across_processes(registry: Registry) -> None:
    saved = registry.save_version("summ", template(), author="ann").version
    code = "from tests.test_registry import template; print(template().content_hash())"
    for seed in ("1", "2"):
        out = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env={"PYTHONHASHSEED": seed, "PATH": ""},
        ).stdout.strip()
        assert out == saved.id


def test_labels_move_and_keep_history(registry: Registry) -> None:
    registry.save_version("summ", template(), author="ann")
    registry.save_version("summ", template("B {{ article }}"), author="ann")
    registry.set_label("summ", "1.0.0", "production", actor="ann")
    registry.set_label("summ", "1.1.0", "staging", actor="ann")
    registry.set_label("summ", "staging", "production", actor="bob")  # promote
    labels = registry.labels("summ")
    assert {k: v.semver for k, v in labels.items()} == {"production": "1.1.0", "staging": "1.1.0"}
    history = registry.label_history("summ", "production")
    assert [(e.semver, e.actor) for e in history] == [("1.1.0", "bob"), ("1.0.0", "ann")]
    with pytest.raises(RegistryError, match="not allowed"):
        registry.set_label("summ", "1.0.0", "latest", actor="ann")
    with pytest.raises(RegistryError, match="not allowed"):
        registry.set_label("summ", "1.0.0", "Prod Label", actor="ann")


def test_reference_resolution(registry: Registry) -> None:
    v1 = registry.save_version("summ", template(), author="ann").version
    v2 = registry.save_version("summ", template("B {{ article }}"), author="ann").version
    registry.set_label("summ", "1.0.0", "production", actor="ann")
    assert registry.resolve("summ").id == v2.id
    assert registry.resolve("summ@latest").id == v2.id
    assert registry.resolve("summ@1.0.0").id == v1.id
    assert registry.resolve("summ@production").id == v1.id
    assert registry.resolve(f"summ@{v1.id[:12]}").id == v1.id


@pytest.mark.parametrize(
    ("ref", "error", "fragment"),
    [
        ("nope", NotFoundError, "no prompt named 'nope'"),
        ("summ@9.9.9", NotFoundError, "known: 1.0.0"),
        ("summ@canary", NotFoundError, "no version, hash or label 'canary'"),
        ("summ@sha256:ffffffff", NotFoundError, "no version of 'summ' has that hash"),
        ("summ@sha256:a", RegistryError, "at least 4 hex digits"),
    ],
)
def test_bad_references(
    registry: Registry, ref: str, error: type[Exception], fragment: str
) -> None:
    registry.save_version("summ", template(), author="ann")
    with pytest.raises(error, match=fragment):
        registry.resolve(ref)


def test_diff_shows_changed_lines_params_and_variables(registry: Registry) -> None:
    registry.save_version("summ", template(params={"temperature": 0.2}), author="ann")
    registry.save_version(
        "summ",
        template("Summarize {{ article }}\nin {{ words }} words", params={"temperature": 0.5}),
        author="ann",
    )
    diff = registry.diff("summ", "1.0.0", "2.0.0")
    assert [m.status for m in diff.messages] == ["same", "changed"]
    assert "+in {{ words }} words" in diff.messages[1].lines
    assert [(c.field, c.before, c.after) for c in diff.params] == [("temperature", 0.2, 0.5)]
    assert [c.field for c in diff.variables] == ["words"]
    text = diff.to_text()
    assert "--- summ@1.0.0" in text and "+in {{ words }} words" in text
    assert registry.diff("summ", "1.0.0", "summ@1.0.0").is_empty
    with pytest.raises(RegistryError, match="names prompt 'other'"):
        registry.diff("summ", "other@1.0.0", "1.0.0")


def test_bad_prompt_name(registry: Registry) -> None:
    with pytest.raises(RegistryError, match="prompt name 'Bad Name'"):
        registry.save_version("Bad Name", template(), author="ann")


def test_list_prompts_and_persistence_across_reopen(store: Store, db_path: Any) -> None:
    registry = Registry(store)
    registry.save_version("summ", template(), author="ann", description="Summaries")
    registry.set_label("summ", "1.0.0", "production", actor="ann")
    store.close()
    with Store(db_path) as reopened:
        [summary] = Registry(reopened).list_prompts()
    assert (summary.name, summary.latest.semver, summary.version_count) == ("summ", "1.0.0", 1)
    assert summary.labels == {"production": "1.0.0"}
    assert summary.description == "Summaries"
