"""Shared widgets' pure parts: Markdown escaping that shows text exactly."""

from __future__ import annotations

import re

import pytest

from promptlab.ui.widgets import escape_markdown


def commonmark_text(markdown: str) -> str:
    """What CommonMark displays for escaped text: backslash escapes resolved."""
    text = re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", markdown)
    return text.replace("\u2060", "").replace("  \n", "\n")


@pytest.mark.parametrize(
    "text",
    [
        "attribute '__class__' is not allowed",
        "*a* **b** ~c~ `d` [link](http://x) <b>html</b> &amp;",
        "$x$ costs $5 and :smile: or :red[x] or :material/lock: or :streamlit:",
        "a -> b <- c -- d >= e <= f ~= g <-> h",
        "line 1\n# not a heading\n1. not a list\n- nor this",
        r"C:\temp\x_y",
    ],
)
def test_escaped_text_displays_exactly_the_text(text: str) -> None:
    escaped = escape_markdown(text)
    assert commonmark_text(escaped) == text
    # No Markdown-active character is left bare.
    assert not re.search(r"(?<!\\)[*_`$\[\]<>~#]", escaped.replace("\\\\", "")), escaped
