"""Reading YAML the one way promptlab does: safe loading, errors that name the place.

Hostile or broken input is one error line, never a traceback or a memory blow-up: files
are bounded in size and must be UTF-8; documents are bounded in nesting and, with their
aliases expanded, in values; an alias inside its own anchor (a recursive structure) is
refused, and so is a key written twice in one mapping (YAML forbids it; PyYAML would
keep the last silently, so a second `model:` lower down would win unseen).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from promptlab.errors import PromptlabError

#: Bytes in a YAML file (and characters of YAML typed into a form). Prompt files, run
#: specs and providers files are a few kilobytes; templates are capped at 1 MB each.
MAX_YAML_BYTES = 10 * 2**20
#: Nesting of lists and mappings. A prompt file nests about 8 deep (versions, messages,
#: variables, JSON Schemas); PyYAML composes recursively, and 10,000 levels exhausted
#: Python's stack.
MAX_YAML_DEPTH = 100
#: Values in a document once every alias is expanded, as json.dumps or a template hash
#: would see it. A billion-laughs file is 1 KB and expands to 10**9.
MAX_YAML_VALUES = 1_000_000


# Not a PromptlabError: caught in `parse_yaml`, which raises the caller's own error class.
class _Refused(Exception):
    """A document past one of the limits; `line` is 1-based, or None when unknown."""

    def __init__(self, line: int | None, problem: str) -> None:
        super().__init__(problem)
        self.line = line
        self.problem = problem


def parse_yaml(text: str, *, where: str, error: type[PromptlabError]) -> Any:
    """`text` as plain data; invalid YAML raises `error` naming `where` and the line."""
    if len(text) > MAX_YAML_BYTES:
        raise error(f"{where}: more than {MAX_YAML_BYTES} characters of YAML")
    try:
        return yaml.load(text, Loader=_BoundedLoader)  # a SafeLoader: plain data only
    except _Refused as exc:
        line = f", line {exc.line}" if exc.line else ""
        raise error(f"{where}{line}: {exc.problem}") from exc
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f", line {mark.line + 1}" if mark else ""
        raise error(f"{where}{line}: not valid YAML ({_problem(exc)})") from exc


def read_yaml(path: str | Path, *, error: type[PromptlabError]) -> Any:
    """The YAML file at `path` as plain data; unreadable or invalid files raise `error`."""
    try:
        with open(path, "rb") as file:
            raw = file.read(MAX_YAML_BYTES + 1)  # never more: the file may be huge or endless
    except OSError as exc:
        raise error(f"{path}: cannot read: {exc.strerror}") from exc
    if len(raw) > MAX_YAML_BYTES:
        raise error(f"{path}: more than {MAX_YAML_BYTES} bytes (the limit for a YAML file)")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise error(
            f"{path}, line {line}: not UTF-8 text "
            f"(byte 0x{raw[exc.start]:02x} at position {exc.start}); save it as UTF-8"
        ) from exc
    return parse_yaml(text, where=str(path), error=error)


def _problem(exc: yaml.YAMLError) -> str:
    if isinstance(exc, yaml.reader.ReaderError):  # a character YAML does not allow
        return f"unacceptable character #x{exc.character:04x} at position {exc.position}"
    return getattr(exc, "problem", None) or "syntax error"


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader that refuses deep nesting, recursive aliases and alias bombs.

    Checked on the composed node graph, before any Python object is built.
    """

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        # Composing recurses once per level: count levels before Python's stack runs out.
        self._depth += 1
        try:
            if self._depth > MAX_YAML_DEPTH:
                mark = self.peek_event().start_mark
                raise _Refused(mark.line + 1, f"nested more than {MAX_YAML_DEPTH} levels deep")
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        if parent is None and node is not None:  # the root: its anchors are still known here
            _check_expansion(node, {id(n): name for name, n in self.anchors.items()})
        return node

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        _check_unique_keys(self, node)
        return super().construct_mapping(node, deep)


def _check_unique_keys(loader: yaml.SafeLoader, node: yaml.MappingNode) -> None:
    """Refuse a mapping whose own keys repeat one (a `<<` merge's keys may be overridden:
    that is what a merge is for)."""
    seen: dict[Any, int] = {}
    for key_node, _value in node.value:
        if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
            continue
        key = loader.construct_object(key_node)
        line = key_node.start_mark.line + 1
        try:
            first = seen.get(key)
        except TypeError:  # not hashable: PyYAML refuses it itself
            continue
        if first is not None:
            raise _Refused(
                line, f"key {key!r} appears twice in one mapping (first on line {first})"
            )
        seen[key] = line


def _check_expansion(root: yaml.Node, anchor_names: dict[int, str]) -> None:
    """Refuse cycles, and graphs that expand past MAX_YAML_VALUES or MAX_YAML_DEPTH.

    Sizes and depths are memoized per node, so shared (aliased) nodes are visited once and
    a bomb is measured without being expanded; the walk uses a stack, not recursion.
    """
    size: dict[int, int] = {}
    depth: dict[int, int] = {}
    entered: set[int] = set()  # nodes whose children are still being measured
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_measured = stack.pop()
        children = _children(node)
        if children_measured:
            size[id(node)] = 1 + sum(size[id(c)] for c in children)
            depth[id(node)] = 1 + max((depth[id(c)] for c in children), default=0)
            entered.discard(id(node))
            line = node.start_mark.line + 1
            if size[id(node)] > MAX_YAML_VALUES:
                raise _Refused(
                    line, f"more than {MAX_YAML_VALUES} values once aliases are expanded"
                )
            if depth[id(node)] > MAX_YAML_DEPTH:
                raise _Refused(
                    line, f"nested more than {MAX_YAML_DEPTH} levels deep once aliases are expanded"
                )
            continue
        if id(node) in size:
            continue
        entered.add(id(node))
        stack.append((node, True))
        for child in children:
            if id(child) in entered:
                name = anchor_names.get(id(child), "?")
                raise _Refused(
                    child.start_mark.line + 1,
                    f"anchor &{name} contains an alias to itself (a recursive structure)",
                )
            stack.append((child, False))


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [item for pair in node.value for item in pair]
    return []
