"""Widgets shared by pages: inputs generated from a variable schema, rendered messages."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

import streamlit as st

from promptlab.audit.redact import redact
from promptlab.data.jsonl import strict_loads

#: Strings allowed to be longer than this get a text area instead of a one-line input.
LONG_TEXT_CHARS = 200
#: ASCII punctuation that Markdown (or Streamlit's additions: `$` LaTeX, `:` icons and
#: colours, `~` strikethrough) may read as syntax. CommonMark lets any of it be escaped.
_MARKDOWN_ACTIVE = re.compile(r"([\\`*_{}\[\]()<>#+\-.!|~$:&=^\"'])")
#: Streamlit rewrites these even when escaped, in the text once escapes are resolved:
#: `:material/x:` to an icon, `:smile:` or `:+1:` to an emoji, ` -> ` to an arrow, and
#: `http://...`, `www.x` and `a@b.c` to live links (GFM autolinks). A word joiner
#: (U+2060, invisible) after their first character or word keeps them text.
_STREAMLIT_SHORTHANDS = re.compile(
    r"(:)(?=material/|[+-]1:|[\w-]+:|//)"
    r"|(?<= )([-<>~])(?=[->=]+ )"
    r"|(?i:\bwww)(?=\.)"
    # An e-mail address: a domain with a dot before a letter. Not a version reference
    # (`name@2.1.0`, `name@production`), which users copy and must stay as typed.
    r"|@(?=[\w-]+(?:\.[\w-]+)*\.[A-Za-z])"
)
_WORD_JOINER = "\u2060"


def variable_inputs(schema: Mapping[str, Any], key: str) -> dict[str, Any]:
    """One input per variable, typed by its JSON Schema; returns the values entered."""
    required = set(schema.get("required", []))
    values: dict[str, Any] = {}
    for name, spec in schema.get("properties", {}).items():
        # Names and descriptions come from a prompt file: labels and tooltips are Markdown.
        label = escape_markdown(name if name in required else f"{name} (optional)")
        help_text = escape_markdown(
            str(spec.get("description") or f"JSON Schema: {json.dumps(spec)}")
        )
        values[name] = variable_input(name, spec, label, f"{key}::{name}", help_text)
    return values


def variable_input(
    name: str, spec: Mapping[str, Any], label: str, widget_key: str, help_text: str
) -> Any:
    """The input of one variable, by its schema's enum or type; returns its value."""
    kind = spec.get("type", "string")
    if "enum" in spec:
        options = list(spec["enum"])
        default = spec.get("default", options[0])
        index = options.index(default) if default in options else 0
        return st.selectbox(label, options, index=index, key=widget_key, help=help_text)
    if kind == "integer":
        return int(
            st.number_input(
                label,
                value=int(spec.get("default", spec.get("minimum", 0))),
                step=1,
                key=widget_key,
                help=help_text,
            )
        )
    if kind == "number":
        return st.number_input(
            label,
            value=float(spec.get("default", spec.get("minimum", 0.0))),
            key=widget_key,
            help=help_text,
        )
    if kind == "boolean":
        return st.checkbox(
            label, value=bool(spec.get("default", False)), key=widget_key, help=help_text
        )
    if kind in {"array", "object"}:
        return structured_input(name, spec, kind, label, widget_key, help_text)
    default = str(spec.get("default", f"Sample {name.replace('_', ' ')}"))
    long = spec.get("maxLength", LONG_TEXT_CHARS + 1) > LONG_TEXT_CHARS
    widget = st.text_area if long else st.text_input
    return widget(label, value=default, key=widget_key, help=help_text)


def structured_input(
    name: str, spec: Mapping[str, Any], kind: str, label: str, widget_key: str, help_text: str
) -> Any:
    """An array of strings as one item per line; any other array or object as JSON."""
    if kind == "array" and spec.get("items", {}).get("type", "string") == "string":
        text = st.text_area(
            f"{label}, one item per line",
            value="\n".join(spec.get("default", [f"sample {name} 1", f"sample {name} 2"])),
            key=widget_key,
            help=help_text,
        )
        return [line for line in text.splitlines() if line.strip()]
    text = st.text_area(
        f"{label} (JSON)",
        value=json.dumps(spec.get("default", [] if kind == "array" else {})),
        key=widget_key,
        help=help_text,
    )
    try:  # NaN and deep nesting too: strict_loads refuses them as ValueErrors
        return strict_loads(text)
    except ValueError:
        return text  # validation reports the wrong type by name


def show_messages(messages: Sequence[Mapping[str, str]]) -> None:
    """Rendered messages as chat bubbles; text shown verbatim, never as Markdown."""
    for message in messages:
        with st.chat_message(message["role"]):
            st.caption(escape_markdown(message["role"]))
            st.code(message["content"], language=None, wrap_lines=True)


def escape_markdown(text: str) -> str:
    """Markdown that displays `text` exactly: no bold, links, HTML, LaTeX, icons, emoji
    or colours; lines kept. Every user-supplied string a page puts in Markdown (a body,
    a label, a caption, a tooltip) goes through this; `st.text`, `st.code` and tables
    need nothing."""
    text = _STREAMLIT_SHORTHANDS.sub(lambda m: m.group(0) + _WORD_JOINER, text)
    return _MARKDOWN_ACTIVE.sub(r"\\\1", text).replace("\n", "  \n")


def show_error(error: str | BaseException, *, icon: str = ":material/error:") -> None:
    """An error box showing the message as plain text (`__class__` stays `__class__`),
    with any key value or credential-shaped string masked."""
    st.error(escape_markdown(redact(str(error))), icon=icon)
