"""Reading JSON Lines the one way promptlab does: objects only, errors that name the line."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from promptlab.errors import PromptlabError, SpecError


def numbered_jsonl(
    handle: Any, path: Path, *, label: str = "dataset", error: type[PromptlabError] = SpecError
) -> Iterator[tuple[int, dict[str, Any]]]:
    """Each JSON object of a JSON Lines file with its line number; blank lines skipped.

    Errors are `error`s naming the file as `{label} {path}, line N`.
    """
    for number, value in numbered_json_values(handle, path, label=label, error=error):
        if not isinstance(value, dict):
            raise error(f"{label} {path}, line {number}: expected a JSON object")
        yield number, value


def numbered_json_values(
    handle: Any, path: Path, *, label: str = "dataset", error: type[PromptlabError] = SpecError
) -> Iterator[tuple[int, Any]]:
    """Each JSON value (any kind) of a JSON Lines file with its line number; blank lines
    skipped. Errors are `error`s naming the file as `{label} {path}, line N`."""
    for number, line in enumerate(handle, start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            raise error(f"{label} {path}, line {number}: not valid JSON ({exc.msg})") from exc
        # JSON may escape half of a UTF-16 pair ("\ud800"): not text anyone can store.
        # Only lines with such an escape need the (costly) full check.
        try:
            if "\\ud" in line or "\\uD" in line:
                json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError as exc:
            raise error(
                f"{label} {path}, line {number}: contains an unpaired surrogate "
                f"({exc.object[exc.start : exc.end]!a}), which is not valid text"
            ) from exc
        yield number, value
