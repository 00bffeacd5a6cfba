"""Limits on what a template may be and on what one render may produce.

A saved template is bounded in size and nesting (checked by templates.py at save time).
A render gets a RenderBudget of loop iterations and characters, counted while it runs:
every loop takes its items through `count_loop_items`, the rendered text is counted as
it streams out, and the filters that can multiply their input (join, replace, indent,
wordwrap, tojson) check their output fits before building it. So memory stays bounded
whatever the template and the values.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import jinja2
import jinja2.filters
import jinja2.utils
from jinja2.runtime import Context

from promptlab.errors import TemplateLimitError

# The numbers are in sizes.py, which loads no jinja2 (a request file's check uses them).
from promptlab.prompts.sizes import (
    MAX_LOOP_ITERATIONS,
    MAX_MESSAGE_CHARS,
    MAX_NESTED_LOOPS,
    MAX_RENDERED_CHARS,
    MAX_TEMPLATE_CHARS,
    MAX_TEMPLATE_DEPTH,
)

__all__ = [
    "BOUNDED_FILTERS",
    "BUDGET_VARIABLE",
    "COUNT_LOOP_FILTER",
    "MAX_LOOP_ITERATIONS",
    "MAX_MESSAGE_CHARS",
    "MAX_NESTED_LOOPS",
    "MAX_RENDERED_CHARS",
    "MAX_TEMPLATE_CHARS",
    "MAX_TEMPLATE_DEPTH",
    "RenderBudget",
    "count_loop_items",
]

#: The render variable holding the budget. Templates cannot name it: names starting
#: with '_' are refused at save time.
BUDGET_VARIABLE = "_promptlab_render_budget"
#: The filter wrapped around every loop's items when a template is compiled; no template
#: can name it either (only SAFE_FILTERS pass the save-time check).
COUNT_LOOP_FILTER = "_promptlab_count_loop"


@dataclass
class RenderBudget:
    """What one render has used so far; `where` names the message being rendered."""

    where: str = "template"
    iterations: int = 0
    chars: int = 0

    def count_iteration(self) -> None:
        self.iterations += 1
        if self.iterations > MAX_LOOP_ITERATIONS:
            raise TemplateLimitError(
                f"{self.where}: more than {MAX_LOOP_ITERATIONS} loop iterations "
                "(the limit for one render); loop over fewer items"
            )

    def count_chars(self, count: int) -> None:
        self.chars += count
        self.check_room(0)

    def check_room(self, more: int, what: str = "") -> None:
        """Raise if `more` characters would take the render past MAX_RENDERED_CHARS."""
        if self.chars + more > MAX_RENDERED_CHARS:
            by = f" (filter {what!r} would add {more})" if what else ""
            raise TemplateLimitError(
                f"{self.where}: more than {MAX_RENDERED_CHARS} characters rendered{by}; "
                "that is the limit for one render: pass shorter values or loop over fewer items"
            )


def _budget(context: Context) -> RenderBudget:
    budget: RenderBudget = context[BUDGET_VARIABLE]
    return budget


@jinja2.pass_context
def count_loop_items(context: Context, items: Iterable[Any]) -> Iterator[Any]:
    """Yield `items`, counting each against the render's budget of loop iterations."""
    budget = _budget(context)
    for item in items:
        budget.count_iteration()
        yield item


# Filters that can return far more than they are given, checked before they build it.
# Each takes the arguments the save-time check lets through (templates.py).


@jinja2.pass_context
def _join(context: Context, value: Iterable[Any], d: str = "") -> str:
    items = [str(item) for item in value]
    _budget(context).check_room(sum(map(len, items)) + len(str(d)) * len(items), "join")
    return str(jinja2.filters.sync_do_join(context.eval_ctx, items, d))


@jinja2.pass_context
def _replace(context: Context, s: Any, old: Any, new: Any, count: int | None = None) -> str:
    text, old, new = str(s), str(old), str(new)
    times = text.count(old) if count is None else min(count, text.count(old))
    _budget(context).check_room(len(text) + times * max(len(new) - len(old), 0), "replace")
    return str(jinja2.filters.do_replace(context.eval_ctx, text, old, new, count))


@jinja2.pass_context
def _indent(context: Context, s: Any, width: int | str = 4, *args: Any, **kwargs: Any) -> str:
    text = str(s)
    pad = len(width) if isinstance(width, str) else int(width)
    _budget(context).check_room(len(text) + (text.count("\n") + 1) * pad, "indent")
    return jinja2.filters.do_indent(text, width, *args, **kwargs)


@jinja2.pass_context
def _wordwrap(
    context: Context,
    s: Any,
    width: int = 79,
    break_long_words: bool = True,
    wrapstring: str | None = None,
    *args: Any,
    **kwargs: Any,
) -> str:
    text = str(s)
    wrap = context.environment.newline_sequence if wrapstring is None else str(wrapstring)
    # A line holds at least half its width, except the last line of each paragraph.
    lines = 2 * len(text) // max(int(width), 1) + text.count("\n") + 1
    _budget(context).check_room(len(text) + lines * len(wrap), "wordwrap")
    return jinja2.filters.do_wordwrap(
        context.environment, text, width, break_long_words, wrapstring, *args, **kwargs
    )


@jinja2.pass_context
def _tojson(context: Context, value: Any, indent: int | None = None) -> Any:
    budget = _budget(context)

    def dumps(obj: Any, **kwargs: Any) -> str:
        # Streamed, so deep indentation of a big value stops before it is built.
        chunks, size = [], 0
        for chunk in json.JSONEncoder(**kwargs).iterencode(obj):
            size += len(chunk)
            budget.check_room(size, "tojson")
            chunks.append(chunk)
        return "".join(chunks)

    kwargs = dict(context.environment.policies["json.dumps_kwargs"])
    if indent is not None:
        kwargs["indent"] = indent
    return jinja2.utils.htmlsafe_json_dumps(value, dumps=dumps, **kwargs)


#: Installed over Jinja's own filters of the same names.
BOUNDED_FILTERS: dict[str, Callable[..., Any]] = {
    "join": _join,
    "replace": _replace,
    "indent": _indent,
    "wordwrap": _wordwrap,
    "tojson": _tojson,
}
