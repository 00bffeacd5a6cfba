r"""Regular expressions a user wrote, run by RE2: linear time, whatever the text.

Output schemas (`pattern`, `patternProperties`), rule patterns and `matches()` in a rule
expression come from whoever pasted a spec or saved a prompt. Python's `re` backtracks:
`^(a+)+$` against forty `a`s and a `!` runs for minutes while holding the interpreter
lock, freezing every run and every page of the process. RE2 (the `google-re2` package)
matches in time linear in the text, and refuses the constructs it cannot run that way
(backreferences, lookaround, possessive quantifiers) when the pattern is compiled, so
they are refused when the pattern is saved or submitted, with the pattern's path.

Patterns are searched, like JSON Schema's `pattern` and Python's `re.search`: unanchored
unless the pattern anchors itself. As in JSON Schema (ECMA-262), `\d` and `\w` are ASCII.
"""

from __future__ import annotations

import functools
from typing import Any

from promptlab.errors import TemplateError

__all__ = ["MAX_PATTERN_CHARS", "PatternError", "compile_pattern", "search"]

#: Longest pattern accepted: a field's pattern is a line, not a document; RE2 also caps
#: the compiled program's memory (RE2_MAX_MEM), so `(a{999}){999}` is refused, not built.
MAX_PATTERN_CHARS = 2_000
#: Memory RE2 may use for one compiled pattern: ample for real patterns, and a bound on
#: what a pasted one can take (RE2's own default is 8 MiB).
RE2_MAX_MEM = 8 << 20


class PatternError(TemplateError):
    """A pattern that RE2 cannot run; the message says why (not which field: callers do)."""


@functools.cache
def _options() -> Any:
    # RE2 is imported with the first pattern compiled: most runs compile none, and a
    # process that only sends requests should not pay for it.
    import re2

    options = re2.Options()
    options.max_mem = RE2_MAX_MEM
    # RE2 otherwise prints every refused pattern to stderr through absl logging.
    options.log_errors = False
    return options


@functools.lru_cache(maxsize=1024)
def compile_pattern(pattern: str) -> Any:
    """`pattern` compiled by RE2; PatternError says what it cannot run."""
    if not isinstance(pattern, str):
        raise PatternError(f"a pattern must be text, not {type(pattern).__name__}")
    if len(pattern) > MAX_PATTERN_CHARS:
        raise PatternError(f"pattern longer than {MAX_PATTERN_CHARS:,} characters")
    import re2

    try:
        return re2.compile(pattern, options=_options())
    except re2.error as exc:
        reason = exc.args[0] if exc.args else exc
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        raise PatternError(f"{pattern!r} is not a regex RE2 can run: {reason}") from exc


def search(pattern: str, text: str) -> bool:
    """Whether `pattern` occurs anywhere in `text` (RE2; compiled once per pattern)."""
    return compile_pattern(pattern).search(text) is not None
