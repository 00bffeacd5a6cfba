"""Word-level differences between two outputs, as HTML safe to show.

Outputs are model text (hostile input): every word is escaped before it is wrapped, so
the only markup in the result is the `<del>` / `<ins>` this module writes.
"""

from __future__ import annotations

import difflib
import html
import re

#: Words, runs of whitespace and single punctuation marks: joined back they are the text.
_TOKENS = re.compile(r"\s+|\w+|[^\w\s]")
DEL_STYLE = "background:#ffd7d5;color:#82071e;text-decoration:line-through"
INS_STYLE = "background:#ccffd8;color:#055d20;text-decoration:none"
#: difflib compares up to every pair of tokens (quadratic on repetitive text: two
#: 8,000-word outputs took 48 s). Above this many pairs the diff goes by lines, and
#: above it again the texts are shown unmarked.
MAX_PAIRS = 400_000


def tokens(text: str) -> list[str]:
    return _TOKENS.findall(text)


def word_diff_html(a: str, b: str) -> tuple[str, str]:
    """`a` with the words `b` lacks in `<del>`, and `b` with the words `a` lacks in `<ins>`
    (whole lines for long outputs; no marks at all for very long ones, see MAX_PAIRS)."""
    ta, tb = tokens(a), tokens(b)
    if len(ta) * len(tb) > MAX_PAIRS:
        ta, tb = a.splitlines(keepends=True), b.splitlines(keepends=True)
        if len(ta) * len(tb) > MAX_PAIRS:
            return html.escape(a), html.escape(b)
    left: list[str] = []
    right: list[str] = []
    matcher = difflib.SequenceMatcher(a=ta, b=tb, autojunk=False)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        old, new = html.escape("".join(ta[i1:i2])), html.escape("".join(tb[j1:j2]))
        if op == "equal":
            left.append(old)
            right.append(new)
            continue
        if old:
            left.append(f'<del style="{DEL_STYLE}">{old}</del>')
        if new:
            right.append(f'<ins style="{INS_STYLE}">{new}</ins>')
    return "".join(left), "".join(right)
