"""The labels the simulated model can read off a support ticket: cue words per label
and the one reading them. The lexicon is data, not simulation, so it lives apart from
the model (providers/simulator.py decides when a model reads a label and answers it);
the demo's accuracy comes from it (right on 37 of the 40 demo tickets)."""

from __future__ import annotations

import re
from collections.abc import Sequence

#: Cue words and phrases for labels support tools use (the demo's ticket categories).
#: A top-level string field whose enum holds such labels is "read" off the last user
#: message: the label with the most cues found (whole words; the first in enum order on
#: a tie) is what the model answers, when it reads at all (simulator.py's `_reads`).
LABEL_CUES: dict[str, tuple[str, ...]] = {
    "billing": (
        "charged",
        "charge",
        "invoice",
        "refund",
        "payment",
        "payments",
        "billed",
        "card",
        "discount",
        "receipts",
        "receipt",
        "vat",
        "downgrade",
        "renewal",
        "price",
        "subscription",
    ),
    "bug": (
        "error",
        "crash",
        "crashes",
        "broken",
        "bug",
        "does nothing",
        "fail",
        "fails",
        "stopped working",
        "blank",
        "slow",
        "twice for every",
        "loses",
        "late",
        "don't include",
        "loops",
    ),
    "account": (
        "account",
        "email",
        "password",
        "log in",
        "login",
        "sign-in",
        "two-factor",
        "locked out",
        "workspace",
        "invite",
    ),
    "feature_request": (
        "would be great",
        "would be nice",
        "could you add",
        "please add",
        "please support",
        "can we get",
        "feature",
        "option",
    ),
    "other": ("legal", "soc 2", "typo", "agreement"),
}
#: Words as cue phrases are matched: letters and digits, with inner hyphens and apostrophes.
_WORD_OR_DIGITS = re.compile(r"[a-z0-9][a-z0-9'\-]*")


def read_label(text: str, labels: Sequence[str]) -> str | None:
    """The label of `labels` whose cues appear most often in `text` (None: no cue)."""
    low = f" {' '.join(_WORD_OR_DIGITS.findall(text.lower()))} "
    counts = {
        label: sum(low.count(f" {cue} ") for cue in LABEL_CUES.get(label, ())) for label in labels
    }
    best = max(labels, key=lambda label: counts[label], default=None)
    return best if best is not None and counts[best] > 0 else None
