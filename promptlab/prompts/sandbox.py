"""The Jinja sandbox templates render in, and the safe subset they are limited to.

Rendering uses Jinja2's sandbox with StrictUndefined. On top of the sandbox, templates
are limited at save time to a small, safe subset of Jinja (variables, attribute and
item lookups on data, a whitelist of filters, `if` and `for`), so a template can never
call functions or reach Python internals. `check_safe` refuses anything else, naming
the line; `compiled` gives the template every loop of which counts against the
render's budget (promptlab/prompts/limits.py).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator

import jinja2
from jinja2 import meta, nodes
from jinja2.sandbox import SandboxedEnvironment

from promptlab.errors import TemplateLimitError, TemplateSyntaxError, UnsafeTemplateError
from promptlab.prompts.limits import (
    BOUNDED_FILTERS,
    COUNT_LOOP_FILTER,
    MAX_NESTED_LOOPS,
    MAX_TEMPLATE_DEPTH,
    count_loop_items,
)

#: Filters that only transform data; none can reach code or the file system.
SAFE_FILTERS = frozenset(
    {
        "abs",
        "capitalize",
        "center",
        "count",
        "d",
        "default",
        "first",
        "float",
        "indent",
        "int",
        "join",
        "last",
        "length",
        "list",
        "lower",
        "replace",
        "round",
        "sort",
        "string",
        "title",
        "tojson",
        "trim",
        "truncate",
        "unique",
        "upper",
        "wordcount",
        "wordwrap",
    }
)
#: Positional arguments allowed where a later one would be an attribute name to look up
#: (join(sep, attribute), sort(reverse, case_sensitive, attribute), unique(cs, attribute)).
_MAX_POSITIONAL = {"join": 1, "sort": 2, "unique": 1}
#: Largest number a filter may take (widths, lengths): no `center(2000000000)`.
MAX_FILTER_NUMBER = 10_000
#: Names Jinja binds itself; as variables they would render engine internals.
RESERVED_NAMES = frozenset({"self", "varargs", "kwargs", "caller"})
SAFE_TESTS = frozenset(
    {"defined", "undefined", "none", "number", "string", "sequence", "mapping", "in", "eq", "ne"}
)
# Node types allowed anywhere in a template; everything else (calls, literals of dicts
# and lists, arithmetic, macros, imports, includes, set, with) is refused at save time.
_ALLOWED_NODES: tuple[type[nodes.Node], ...] = (
    nodes.Template,
    nodes.Output,
    nodes.TemplateData,
    nodes.Name,
    nodes.Const,
    nodes.Getattr,
    nodes.Getitem,
    nodes.Filter,
    nodes.Test,
    nodes.If,
    nodes.For,
    nodes.CondExpr,
    nodes.And,
    nodes.Or,
    nodes.Not,
    nodes.Compare,
    nodes.Operand,
    nodes.Tuple,
    nodes.Concat,
)


def _environment() -> SandboxedEnvironment:
    env = SandboxedEnvironment(
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        # `{#` is common in prompt text (markdown, hashtags); make comments need `{##`.
        comment_start_string="{##",
        comment_end_string="##}",
    )
    env.globals.clear()  # no range(), lipsum(), cycler ... : names are variables only
    env.filters.update(BOUNDED_FILTERS)
    env.filters[COUNT_LOOP_FILTER] = count_loop_items
    return env


_ENV = _environment()


def check_safe(source: str, where: str = "template") -> None:
    """Refuse syntax errors, deep nesting and anything outside the safe subset, naming the line."""
    ast = _parse(source, where)
    _check_nesting(ast, where)
    for node in _walk(ast):
        line = getattr(node, "lineno", None)
        at = f"{where}, line {line}" if line else where
        if not isinstance(node, _ALLOWED_NODES):
            raise UnsafeTemplateError(f"{at}: {_describe_forbidden(node)}")
        if isinstance(node, nodes.Getattr) and node.attr.startswith("_"):
            raise UnsafeTemplateError(
                f"{at}: attribute {node.attr!r} is not allowed "
                "(names starting with '_' reach Python internals)"
            )
        if isinstance(node, nodes.Getitem):
            key = node.arg
            if not isinstance(key, nodes.Const) or (
                isinstance(key.value, str) and key.value.startswith("_")
            ):
                raise UnsafeTemplateError(
                    f"{at}: only constant keys that do not start with '_' may be looked up"
                )
        if isinstance(node, nodes.Name) and node.name.startswith("_"):
            raise UnsafeTemplateError(f"{at}: variable names may not start with '_'")
        if isinstance(node, nodes.Filter) and node.name not in SAFE_FILTERS:
            raise UnsafeTemplateError(
                f"{at}: filter {node.name!r} is not allowed; "
                f"allowed: {', '.join(sorted(SAFE_FILTERS))}"
            )
        if isinstance(node, nodes.Filter):
            _check_filter_arguments(node, at)
        if isinstance(node, nodes.Name) and node.name in RESERVED_NAMES:
            raise UnsafeTemplateError(f"{at}: {node.name!r} is reserved by the template engine")
        if isinstance(node, nodes.Test) and node.name not in SAFE_TESTS:
            raise UnsafeTemplateError(f"{at}: test {node.name!r} is not allowed")
        if isinstance(node, nodes.For) and node.recursive:
            raise UnsafeTemplateError(f"{at}: recursive loops are not allowed")
    compiled(source, where)  # what is saved must compile (and is cached for rendering)


def _check_filter_arguments(node: nodes.Filter, at: str) -> None:
    """No `attribute=` lookups by name, and no sizes that would blow up memory."""
    if any(kw.key == "attribute" for kw in node.kwargs) or len(node.args) > _MAX_POSITIONAL.get(
        node.name, len(node.args)
    ):
        raise UnsafeTemplateError(
            f"{at}: filter {node.name!r} may not look up attributes by name; "
            "pass the values you need as variables"
        )
    for arg in [*node.args, *(kw.value for kw in node.kwargs)]:
        number = arg.value if isinstance(arg, nodes.Const) else None
        if (
            isinstance(number, int | float)
            and not isinstance(number, bool)
            and abs(number) > MAX_FILTER_NUMBER
        ):
            raise UnsafeTemplateError(
                f"{at}: filter {node.name!r} argument {number} is larger than {MAX_FILTER_NUMBER}"
            )


def compiled(source: str, where: str) -> jinja2.Template:
    """The compiled template; a template too deep for Python itself is a TemplateLimitError."""
    try:
        return _compile(source)
    except (RecursionError, SyntaxError) as exc:  # CPython's limits, past MAX_TEMPLATE_DEPTH
        raise TemplateLimitError(
            f"{where}: nested too deeply to compile (keep it under {MAX_TEMPLATE_DEPTH} levels)"
        ) from exc


@functools.lru_cache(maxsize=2048)
def _compile(source: str) -> jinja2.Template:
    ast = _ENV.parse(source)
    for node in _walk(ast):
        if isinstance(node, nodes.For):
            # Every loop takes its items through the render's budget (count_loop_items).
            node.iter = nodes.Filter(
                node.iter, COUNT_LOOP_FILTER, [], [], None, None, lineno=node.lineno
            )
    return _ENV.from_string(ast)


def _parse(source: str, where: str) -> nodes.Template:
    try:
        return _ENV.parse(source)
    except jinja2.TemplateSyntaxError as exc:
        hint, text = "", exc.message or ""
        if "expected token" in text or "unexpected" in text:
            hint = " (for literal braces use {% raw %}...{% endraw %})"
        raise TemplateSyntaxError(f"{where}, line {exc.lineno}: {text}{hint}") from exc
    except RecursionError as exc:  # Jinja's parser recurses once per bracket and tag
        raise TemplateLimitError(
            f"{where}: nested more than {MAX_TEMPLATE_DEPTH} levels deep (too deep to parse)"
        ) from exc


def _check_nesting(ast: nodes.Template, where: str) -> None:
    """Refuse templates nested deeper than MAX_TEMPLATE_DEPTH or MAX_NESTED_LOOPS."""
    stack: list[tuple[nodes.Node, int, int]] = [(ast, 0, 0)]
    while stack:
        node, depth, loops = stack.pop()
        line = getattr(node, "lineno", None)
        at = f"{where}, line {line}" if line else where
        if depth > MAX_TEMPLATE_DEPTH:
            raise TemplateLimitError(f"{at}: nested more than {MAX_TEMPLATE_DEPTH} levels deep")
        if loops > MAX_NESTED_LOOPS:
            raise TemplateLimitError(f"{at}: more than {MAX_NESTED_LOOPS} nested loops")
        for child in node.iter_child_nodes():
            stack.append((child, depth + 1, loops + isinstance(child, nodes.For)))


def _walk(node: nodes.Node) -> Iterator[nodes.Node]:
    """Every node, parents before children, in source order; no recursion, so no depth limit."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(reversed(list(current.iter_child_nodes())))


def _describe_forbidden(node: nodes.Node) -> str:
    if isinstance(node, nodes.Call):
        return "function and method calls are not allowed in templates"
    if isinstance(node, nodes.Dict | nodes.List):
        return (
            "dict and list literals are not allowed inside {{ }}; "
            "for literal JSON braces use {% raw %}...{% endraw %}"
        )
    if isinstance(node, nodes.BinExpr | nodes.UnaryExpr):
        return "arithmetic is not allowed in templates; compute values before rendering"
    tag = _FORBIDDEN_TAGS.get(type(node))
    if tag:
        return f"{{% {tag} %}} is not allowed in templates"
    return f"'{type(node).__name__}' is not allowed in templates"


_FORBIDDEN_TAGS: dict[type[nodes.Node], str] = {
    nodes.Assign: "set",
    nodes.AssignBlock: "set",
    nodes.Macro: "macro",
    nodes.CallBlock: "call",
    nodes.Include: "include",
    nodes.Import: "import",
    nodes.FromImport: "from ... import",
    nodes.Extends: "extends",
    nodes.Block: "block",
    nodes.With: "with",
    nodes.FilterBlock: "filter",
}


def find_variables(sources: Iterable[str]) -> tuple[list[str], dict[str, str]]:
    """Variables of the message sources in order of first use, and a guessed JSON type for each."""
    names: list[str] = []
    shapes: dict[str, str] = {}
    for source in sources:
        ast = _ENV.parse(source)
        free = meta.find_undeclared_variables(ast)
        for node in _walk(ast):
            if isinstance(node, nodes.Name) and node.name in free and node.name not in names:
                names.append(node.name)
            if isinstance(node, nodes.For) and isinstance(node.iter, nodes.Name):
                shapes.setdefault(node.iter.name, "array")
            if isinstance(node, nodes.Getattr | nodes.Getitem) and isinstance(
                node.node, nodes.Name
            ):
                shapes.setdefault(node.node.name, "object")
    return names, {k: v for k, v in shapes.items() if k in names}
