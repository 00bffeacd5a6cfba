"""Reading YAML the one way promptlab does: safe loading, errors that name the place."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from promptlab.errors import PromptlabError


def parse_yaml(text: str, *, where: str, error: type[PromptlabError]) -> Any:
    """`text` as plain data; invalid YAML raises `error` naming `where` and the line."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f", line {mark.line + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "syntax error"
        raise error(f"{where}{line}: not valid YAML ({problem})") from exc


def read_yaml(path: str | Path, *, error: type[PromptlabError]) -> Any:
    """The YAML file at `path` as plain data; unreadable or invalid files raise `error`."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise error(f"{path}: cannot read: {exc.strerror}") from exc
    return parse_yaml(text, where=str(path), error=error)
