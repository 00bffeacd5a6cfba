"""What a run's repeats say per variant: between-repeat spread, token consistency and
perplexity (computed in promptlab/analysis/repeats.py, read in promptlab/store/repeats.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class RepeatResult:
    """One final result of a run, as the repeat statistics read it."""

    row_index: int
    repeat: int
    #: Succeeded: the endpoint answered (its text is compared across repeats).
    succeeded: bool
    #: Counts as complete (succeeded, output check passed or repaired, no rule failed).
    completed: bool
    output_text: str | None
    latency_ms: float | None
    output_tokens: int | None
    #: Mean log-probability of the output's chosen tokens and how many were scored;
    #: None when the endpoint gave no log-probabilities.
    logprob_mean: float | None = None
    logprob_tokens: int | None = None
    #: The temperature and top_p the request was sent with (after its sampling step).
    temperature: float | None = None
    top_p: float | None = None


@dataclass(frozen=True)
class RowSpread:
    """One dataset row's repeats under one variant (its succeeded ones)."""

    row_index: int
    repeats: int
    latency_mean_ms: float | None
    #: Sample standard deviation (n - 1) across the row's repeats; None under 2.
    latency_std_ms: float | None
    tokens_mean: float | None
    tokens_std: float | None


@dataclass(frozen=True)
class VariantRepeats:
    """One variant's repeat statistics; each "mean over rows" weighs every row with at
    least two repeats (two succeeded ones for text and numbers) equally."""

    variant: str
    #: Final results and the rows with at least two succeeded repeats.
    results: int
    rows: int
    #: Mean over rows of the standard deviation of latency (ms) / output tokens across
    #: the row's succeeded repeats: how much a repeat moves, not how rows differ.
    latency_spread_ms: float | None
    tokens_spread: float | None
    #: Mean over rows of the share of repeat pairs that agree on whether the result
    #: counts as complete (rows with two or more final results).
    completion_agreement: float | None
    #: Token consistency, exact: mean over rows of the share of pairs of succeeded
    #: repeats whose output texts are identical (1.0: every repeat said the same).
    exact_agreement: float | None
    #: Share of rows whose succeeded repeats all gave the very same text.
    rows_identical: float | None
    #: Token consistency by field: per top-level field of JSON outputs, the mean over
    #: rows of the share of pairs (both outputs JSON objects) whose values are equal
    #: (absent from both counts as equal).
    field_agreement: Mapping[str, float] = field(default_factory=dict)
    #: exp(-mean log-probability) over every scored output token of the variant
    #: (token-weighted); None when the endpoint gave no log-probabilities.
    perplexity: float | None = None
    scored_tokens: int = 0
    #: Mean temperature and top_p sent (None: not sent, the endpoint's default).
    temperature_mean: float | None = None
    top_p_mean: float | None = None
    spreads: tuple[RowSpread, ...] = ()


@dataclass(frozen=True)
class RepeatsReport:
    run_id: str
    #: Repeats per row the run was planned with (the most any row got).
    repeats: int
    variants: tuple[VariantRepeats, ...]
