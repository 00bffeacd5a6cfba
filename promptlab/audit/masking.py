"""Masking personal data on request (PROMPTLAB_MASK=email,phone,key): the patterns a
user may turn on, and the Masker that applies them and counts what it masked."""

from __future__ import annotations

import re
from collections.abc import Sequence

#: Patterns the user may turn on (PROMPTLAB_MASK=email,phone,key): personal data and
#: key-like strings in prompts and outputs. Secrets proper are always redacted.
MASK_PATTERNS: dict[str, re.Pattern[str]] = {
    "email": re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}"),
    "phone": re.compile(r"(?<![\w+])\+?\d[\d ().-]{7,}\d(?!\w)"),
    "key": re.compile(r"\b(?=[A-Za-z0-9_-]*\d)(?=[A-Za-z0-9_-]*[A-Za-z])[A-Za-z0-9_-]{32,}\b"),
}


class Masker:
    """Masks the chosen patterns; counts what it masked, per pattern."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = tuple(names)
        self._patterns = [(name, MASK_PATTERNS[name]) for name in self.names]

    def __bool__(self) -> bool:
        return bool(self._patterns)

    def mask(self, text: str, counts: dict[str, int]) -> str:
        for name, pattern in self._patterns:
            text, found = pattern.subn(f"[masked:{name}]", text)
            if found:
                counts[name] = counts.get(name, 0) + found
        return text
