"""Reading YAML: bad or hostile input is one line naming the file and line, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from promptlab.errors import PromptFileError
from promptlab.yamlio import parse_yaml, read_yaml


def laughs(levels: int) -> str:
    """A billion-laughs document: each level lists the previous one nine times."""
    lines = ['l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, levels + 1):
        lines.append(f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


HOSTILE = [
    (b"name: x\ndescription: caf\xe9\n", "line 2: not UTF-8 text (byte 0xe9 at position 24)"),
    (b"[" * 10_000 + b"]" * 10_000, "line 1: nested more than 100 levels deep"),
    (b"a: &a [*a]\n", "line 1: anchor &a contains an alias to itself"),
    (b"a: &a {b: [1, {c: *a}]}\n", "line 1: anchor &a contains an alias to itself"),
    (laughs(9).encode(), "more than 1000000 values once aliases are expanded"),
    (b"x: " + b"[" * 60 + b"]" * 60 + b"\ny: &y [*y]\n", "line 2: anchor &y"),
    (b"name: a\x00b\n", "not valid YAML (unacceptable character #x0000"),
]


@pytest.mark.parametrize(("content", "fragment"), HOSTILE)
def test_hostile_files_are_one_line_naming_file_and_place(
    tmp_path: Path, content: bytes, fragment: str
) -> None:
    path = tmp_path / "p.yaml"
    path.write_bytes(content)
    with pytest.raises(PromptFileError) as info:
        read_yaml(path, error=PromptFileError)
    message = str(info.value)
    assert message.startswith(f"{path}, ") or message.startswith(f"{path}:")
    assert fragment in message and "\n" not in message


@pytest.mark.parametrize(("content", "fragment"), [h for h in HOSTILE if b"\xe9" not in h[0]])
def test_hostile_text_typed_into_a_form_is_refused_too(content: bytes, fragment: str) -> None:
    with pytest.raises(PromptFileError) as info:
        parse_yaml(content.decode(), where="variable schema", error=PromptFileError)
    assert str(info.value).startswith("variable schema") and fragment in str(info.value)


def test_a_file_too_big_is_refused_before_it_is_parsed(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    path.write_bytes(b"# " + b"x" * (10 * 2**20) + b"\n")
    with pytest.raises(PromptFileError, match=r"big\.yaml: more than 10485760 bytes"):
        read_yaml(path, error=PromptFileError)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # Anchors used as intended still work: shared, not recursive, not exploding.
        ("base: &b {x: 1}\nother: *b\n", {"base": {"x": 1}, "other": {"x": 1}}),
        (laughs(3), None),  # 9**4 values: fine
        ("a: " + "[" * 99 + "]" * 99 + "\n", None),  # 100 levels: the nesting limit
    ],
)
def test_reasonable_documents_still_load(text: str, expected: object) -> None:
    data = parse_yaml(text, where="x", error=PromptFileError)
    if expected is not None:
        assert data == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "name: a\nmodel: x\nrepeats: 1\nmodel: y\n",
            "spec.yaml, line 4: key 'model' appears twice in one mapping (first on line 2)",
        ),
        (
            "variants:\n  - name: a\n    params: {temperature: 0.2, temperature: 1.5}\n",
            "spec.yaml, line 3: key 'temperature' appears twice in one mapping (first on line 3)",
        ),
    ],
)
def test_a_key_written_twice_is_refused_naming_the_key_and_line(text: str, message: str) -> None:
    with pytest.raises(PromptFileError) as refused:
        parse_yaml(text, where="spec.yaml", error=PromptFileError)
    assert str(refused.value) == message


def test_a_merge_s_keys_may_still_be_overridden() -> None:
    text = "base: &b {model: x, repeats: 1}\nrun:\n  <<: *b\n  model: y\n"
    data = parse_yaml(text, where="spec.yaml", error=PromptFileError)
    assert data["run"] == {"model": "y", "repeats": 1}
