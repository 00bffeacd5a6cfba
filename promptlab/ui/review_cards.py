"""The Review page's answers to one row: each model's answer in a card, side by side;
a row sent several times (`repeats:`) as one card with a tab per repeat, and JSON
answers laid out on lines of their own, wrapped, never squeezed into a narrow column."""

from __future__ import annotations

import json
from typing import Any

import streamlit as st

from promptlab.records.review import ReviewDetail
from promptlab.ui.widgets import escape_markdown
from promptlab.views.review import answer_rows

#: Cards side by side at most; more wrap onto the next line (each keeps a readable width).
PER_LINE = 3
#: Longest answer laid out again as indented JSON (longer ones are shown as they are).
PRETTY_MAX_CHARS = 200_000
_SHOWN = ("variant", "model", "status", "output")


def by_repeat(answers: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The answers grouped by repeat: the n-th answer of each variant goes to the n-th
    group (the store lists a row's results by variant, then repeat)."""
    groups: list[list[dict[str, Any]]] = []
    seen: dict[str, int] = {}
    for answer in answers:
        n = seen.get(answer["variant"], 0)
        seen[answer["variant"]] = n + 1
        if n == len(groups):
            groups.append([])
        groups[n].append(answer)
    return groups


def answer_cards(detail: ReviewDetail) -> None:
    """Every answer to the row: one repeat's answers side by side; several repeats in
    one card, a tab per repeat."""
    groups = by_repeat(answer_rows(detail))
    if len(groups) <= 1:
        _side_by_side(groups[0] if groups else [])
        return
    with st.container(border=True, key="review_repeats"):
        st.caption(f"This row was sent {len(groups)} times: one tab per repeat.")
        for n, tab in enumerate(st.tabs([f"Repeat {i + 1}" for i in range(len(groups))])):
            with tab:
                _side_by_side(groups[n])


def _side_by_side(answers: list[dict[str, Any]]) -> None:
    for start in range(0, max(1, len(answers)), PER_LINE):
        line = answers[start : start + PER_LINE]
        for column, answer in zip(st.columns(max(1, len(line))), line, strict=False):
            with column.container(border=True):
                _answer(answer)


def _answer(answer: dict[str, Any]) -> None:
    st.markdown(f"**{answer['variant']}** · {answer['model']} · {answer['status']}")
    text, language = shown_output(answer["output"])
    st.code(text, language=language, wrap_lines=True)
    facts = [
        f"{k} **{escape_markdown(_figure(v))}**"
        for k, v in answer.items()
        if k not in _SHOWN and v is not None
    ]
    st.markdown(" · ".join(facts))


def shown_output(output: str | None) -> tuple[str, str | None]:
    """An answer as shown and its highlighting: a JSON object or array indented, a line
    a field (so it wraps by field, not a character at a time); other text as it is."""
    if not output:
        return "(no output)", None
    text = output.strip()
    if text[:1] in "{[" and len(text) <= PRETTY_MAX_CHARS:
        try:
            return json.dumps(json.loads(text), indent=2, ensure_ascii=False), "json"
        except (ValueError, RecursionError):
            pass  # not JSON after all: shown as it is
    return output, None


def _figure(value: object) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)
