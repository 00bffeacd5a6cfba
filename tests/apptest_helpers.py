"""Helpers for Streamlit AppTests shared by the page tests."""

from __future__ import annotations

import re


def shown(markdown: str) -> str:
    """The text Markdown displays: CommonMark backslash escapes resolved, breaks as lines."""
    text = re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", markdown)
    return text.replace("\u2060", "").replace("  \n", "\n")
