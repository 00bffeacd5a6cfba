"""What repeats of the same row say about a variant. Pure.

A run with `repeats: N` sends each dataset row N times through each variant. At
temperature 0 a model answers a row the same way every time; above it, its answers
differ. Per variant (records.repeats.VariantRepeats says what each number is):

- **between-repeat spread**: for each row, the sample standard deviation (n - 1) of
  latency and of output tokens across its succeeded repeats, averaged over rows. It is
  the noise of one request, not the difference between rows.
- **completion agreement**: for each row, the share of its repeat pairs that agree on
  whether the result counts as complete, averaged over rows.
- **token consistency, exact**: for each row, the share of pairs of succeeded repeats
  whose output texts are identical, averaged over rows (1.0 at temperature 0); and the
  share of rows whose repeats all gave the same text.
- **token consistency by field**: for JSON object outputs, per top-level field, the share
  of pairs (both outputs parsed as objects) with equal values, averaged over rows.
- **perplexity**: exp(-(sum of log-probabilities of the scored output tokens) / (their
  number)) over the variant's results with log-probabilities: how unsure the model was of
  the tokens it chose (1 = certain). None when the endpoint gave no log-probabilities.
"""

from __future__ import annotations

import itertools
import json
import math
from collections import defaultdict
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

from promptlab.records.repeats import RepeatResult, RowSpread, VariantRepeats

#: A field absent from an output: equal only to itself absent from the other.
_ABSENT = object()


def pair_agreement(values: Sequence[Hashable]) -> float | None:
    """The share of the n(n-1)/2 pairs of `values` that are equal; None under 2 values."""
    if len(values) < 2:
        return None
    pairs = list(itertools.combinations(values, 2))
    return sum(a == b for a, b in pairs) / len(pairs)


def sample_std(values: Sequence[float]) -> float | None:
    """The sample standard deviation (n - 1); None under 2 values."""
    if len(values) < 2:
        return None
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


def json_fields(text: str | None) -> dict[str, str] | None:
    """A JSON object output's top-level fields, each value as canonical JSON; None when
    the text is not a JSON object."""
    if not text:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    if not isinstance(value, dict):
        return None
    return {str(k): json.dumps(v, sort_keys=True) for k, v in value.items()}


def field_agreement(outputs: Sequence[Mapping[str, str] | None]) -> dict[str, float]:
    """Per field seen in any parsed output, the share of pairs of parsed outputs whose
    values for it are equal (absent from both: equal); empty under 2 parsed outputs."""
    parsed = [o for o in outputs if o is not None]
    if len(parsed) < 2:
        return {}
    names = sorted({name for o in parsed for name in o})
    pairs = list(itertools.combinations(parsed, 2))
    return {
        name: sum(a.get(name, _ABSENT) == b.get(name, _ABSENT) for a, b in pairs) / len(pairs)
        for name in names
    }


def perplexity(results: Sequence[RepeatResult]) -> tuple[float | None, int]:
    """(perplexity, tokens scored): exp of minus the token-weighted mean log-probability
    over results that carry log-probabilities; (None, 0) when none do."""
    scored = [
        (r.logprob_mean, r.logprob_tokens)
        for r in results
        if r.logprob_mean is not None and r.logprob_tokens
    ]
    tokens = sum(n for _, n in scored)
    if not tokens:
        return None, 0
    return math.exp(-sum(mean * n for mean, n in scored) / tokens), tokens


def _mean(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None


def row_spread(row_index: int, results: Sequence[RepeatResult]) -> RowSpread:
    """One row's succeeded repeats: mean and sample std of latency and output tokens."""
    ok = [r for r in results if r.succeeded]
    latency = [r.latency_ms for r in ok if r.latency_ms is not None]
    tokens = [float(r.output_tokens) for r in ok if r.output_tokens is not None]
    return RowSpread(
        row_index=row_index,
        repeats=len(ok),
        latency_mean_ms=_mean(latency),
        latency_std_ms=sample_std(latency),
        tokens_mean=_mean(tokens),
        tokens_std=sample_std(tokens),
    )


def _field_means(per_row: Sequence[Mapping[str, float]]) -> dict[str, float]:
    collected: dict[str, list[float]] = defaultdict(list)
    for row in per_row:
        for name, share in row.items():
            collected[name].append(share)
    return {name: sum(v) / len(v) for name, v in sorted(collected.items())}


def variant_repeats(variant: str, results: Sequence[RepeatResult]) -> VariantRepeats:
    """Every repeat statistic of one variant's final results (see the module doc)."""
    by_row: dict[int, list[RepeatResult]] = defaultdict(list)
    for r in results:
        by_row[r.row_index].append(r)
    spreads, exact, identical, fields, completion = [], [], [], [], []
    for row_index in sorted(by_row):
        row = sorted(by_row[row_index], key=lambda r: r.repeat)
        spreads.append(row_spread(row_index, row))
        completion.append(pair_agreement([r.completed for r in row]))
        texts = [r.output_text or "" for r in row if r.succeeded]
        if len(texts) >= 2:
            exact.append(pair_agreement(texts))
            identical.append(1.0 if len(set(texts)) == 1 else 0.0)
            fields.append(field_agreement([json_fields(t) for t in texts]))
    ppl, scored = perplexity(results)
    return VariantRepeats(
        variant=variant,
        results=len(results),
        rows=len(exact),
        latency_spread_ms=_mean([s.latency_std_ms for s in spreads]),
        tokens_spread=_mean([s.tokens_std for s in spreads]),
        completion_agreement=_mean(completion),
        exact_agreement=_mean(exact),
        rows_identical=_mean(identical),
        field_agreement=_field_means(fields),
        perplexity=ppl,
        scored_tokens=scored,
        temperature_mean=_mean([r.temperature for r in results]),
        top_p_mean=_mean([r.top_p for r in results]),
        spreads=tuple(spreads),
    )


def repeats_of(results: Mapping[str, Sequence[RepeatResult]]) -> list[VariantRepeats]:
    """`variant_repeats` of each variant, in the mapping's order."""
    return [variant_repeats(name, rows) for name, rows in results.items()]


def describe(stats: VariantRepeats) -> dict[str, Any]:
    """The statistics as plain JSON-able numbers (`promptlab repeats --json`)."""
    return {
        "variant": stats.variant,
        "results": stats.results,
        "rows": stats.rows,
        "temperature_mean": stats.temperature_mean,
        "top_p_mean": stats.top_p_mean,
        "perplexity": stats.perplexity,
        "scored_tokens": stats.scored_tokens,
        "exact_agreement": stats.exact_agreement,
        "rows_identical": stats.rows_identical,
        "field_agreement": dict(stats.field_agreement),
        "completion_agreement": stats.completion_agreement,
        "latency_spread_ms": stats.latency_spread_ms,
        "tokens_spread": stats.tokens_spread,
    }
