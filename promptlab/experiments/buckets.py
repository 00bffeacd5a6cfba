"""Buckets: where a unit hashes to, and how variants share the 10,000 buckets.

The same answer in every process, on every machine:

- **Buckets.** `bucket_of(salt, unit)` hashes the experiment's salt and the unit id
  with SHA-256 into one of 10,000 buckets. The experiment's `allocation` gives each
  variant ranges of buckets, sized by the weights (largest remainder).
- **Minimal movement.** When weights change, `allocate(weights, previous)` lets every
  variant keep as many of its buckets as its new share allows; only freed buckets
  move, so the fewest units change variant, and buckets move only from variants that
  shrank to variants that grew.
- **Ramp.** A second, separate hash (`ramp_bucket_of`) decides whether a unit is in
  the experiment at all (`ramp_bucket < ramp * 100`), independent of its bucket.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from fractions import Fraction

from promptlab.errors import ExperimentError

#: Buckets a unit hashes into: 0.01% of traffic each.
BUCKETS = 10_000
#: Joins the salt and the unit id before hashing; a byte no name or id contains.
SEPARATOR = "\x1f"
#: Marks the ramp hash apart from the variant hash, so the two are independent.
RAMP_TAG = "ramp"

BucketRange = tuple[int, int]
#: Variant name -> half-open bucket ranges [start, end), sorted, adjacent ones merged.
Allocation = dict[str, tuple[BucketRange, ...]]


def unit_text(unit_id: object) -> str:
    """A unit id as the text that is hashed: strings as they are, integers in decimal.

    So customer 42 and customer "42" are the same unit. Anything else (floats, booleans,
    None, empty text) is refused: 42.0 and "42" would silently be different units.
    """
    if isinstance(unit_id, str):
        if not unit_id:
            raise ExperimentError("unit id is empty")
        return unit_id
    if isinstance(unit_id, int) and not isinstance(unit_id, bool):
        return str(unit_id)
    raise ExperimentError(
        f"unit id {unit_id!r:.40} is a {type(unit_id).__name__}; give a string or an integer"
    )


def _hash_bucket(text: str) -> int:
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % BUCKETS


def bucket_of(salt: str, unit_id: object) -> int:
    """The unit's bucket in [0, BUCKETS): sha256(salt + "\\x1f" + unit), first 8 bytes, mod.

    Any language can compute it: the first 8 bytes of the digest as a big-endian
    unsigned integer, modulo 10,000.
    """
    return _hash_bucket(f"{salt}{SEPARATOR}{unit_text(unit_id)}")


def ramp_bucket_of(salt: str, unit_id: object) -> int:
    """The unit's ramp bucket: sha256(salt + "\\x1framp\\x1f" + unit), independent of its bucket."""
    return _hash_bucket(f"{salt}{SEPARATOR}{RAMP_TAG}{SEPARATOR}{unit_text(unit_id)}")


def ramp_threshold(ramp: float) -> int:
    """Ramp buckets below this are in the experiment (ramp 12.5 -> 1250 of 10,000)."""
    return round(ramp * BUCKETS / 100)


def bucket_counts(
    weights: Mapping[str, float], previous: Mapping[str, int] | None = None
) -> dict[str, int]:
    """Buckets per variant by the largest remainder method. Exact (fractions).

    Equal remainders go first to variants that already had the bucket (`previous`
    counts above their new floor), so rounding never moves a unit between two variants
    whose shares did not change; then to the earlier variant.
    """
    exact = {name: Fraction(w) for name, w in weights.items()}
    total = sum(exact.values())
    if total <= 0:
        raise ExperimentError("weights: at least one weight must be above 0")
    quotas = {name: w * BUCKETS / total for name, w in exact.items()}
    counts = {name: int(q) for name, q in quotas.items()}
    had = previous or {}
    order = {name: index for index, name in enumerate(weights)}
    leftover = BUCKETS - sum(counts.values())
    by_remainder = sorted(
        order,
        key=lambda n: (-(quotas[n] - counts[n]), had.get(n, 0) <= counts[n], order[n]),
    )
    for name in by_remainder[:leftover]:
        counts[name] += 1
    return counts


def allocate(weights: Mapping[str, float], previous: Allocation | None = None) -> Allocation:
    """Bucket ranges for `weights` (variant name -> weight, in variant order).

    Without `previous`, each variant gets one contiguous range, in order. With it, every
    variant keeps its lowest buckets up to its new count, and only the freed buckets
    (the excess of variants that shrank, and all of removed variants) go to the
    variants that grew, lowest first: the number of buckets that change variant is the
    sum of the positive count changes, the least any allocation could move.
    """
    previous_counts = {n: sum(e - s for s, e in r) for n, r in (previous or {}).items()}
    counts = bucket_counts(weights, previous_counts)
    if not previous:
        allocation: Allocation = {}
        start = 0
        for name, count in counts.items():
            allocation[name] = ((start, start + count),) if count else ()
            start += count
        return allocation
    owned: dict[str, list[int]] = {name: [] for name in counts}
    freed: list[int] = []
    for name, ranges in previous.items():
        buckets = [b for start, end in sorted(ranges) for b in range(start, end)]
        keep = counts.get(name, 0)
        if name in owned:
            owned[name] = buckets[:keep]
            freed.extend(buckets[keep:])
        else:
            freed.extend(buckets)
    claimed = sum(len(b) for b in owned.values()) + len(freed)
    if claimed != BUCKETS:
        raise ExperimentError(f"previous allocation covers {claimed} buckets, not {BUCKETS}")
    freed.sort()
    for name, count in counts.items():
        need = count - len(owned[name])
        if need > 0:
            owned[name].extend(freed[:need])
            del freed[:need]
    return {name: _ranges(sorted(owned[name])) for name in counts}


def _ranges(buckets: Sequence[int]) -> tuple[BucketRange, ...]:
    """Sorted bucket numbers as merged half-open ranges."""
    out: list[list[int]] = []
    for b in buckets:
        if out and out[-1][1] == b:
            out[-1][1] = b + 1
        else:
            out.append([b, b + 1])
    return tuple((s, e) for s, e in out)


def owners(allocation: Allocation) -> list[str]:
    """The variant owning each bucket, by bucket number (for tests and summaries)."""
    table = [""] * BUCKETS
    for name, ranges in allocation.items():
        for start, end in ranges:
            table[start:end] = [name] * (end - start)
    return table
