"""Anomaly alerts over a run's finished results, in the order they finished.

Pure: `RunDetector.observe` takes one `Observation` and returns the alerts it raises.
Each detector works per variant and costs O(1) per item (bounded windows and counters;
the earlier length median is refreshed once every WINDOW items). An alert is raised
once when its condition starts; it is raised again only after the condition has
cleared (past half its threshold), so a long episode is one alert, not one per item.

Detectors and thresholds:

- failure_rate: the share of items that did not complete (failed, or an invalid or
  truncated output) in the last WINDOW items is above max(3 x baseline,
  baseline + 20 points), with at least MIN_FAILURES such items in the window; the
  baseline is the share over every earlier item of the variant (at least WINDOW of them).
- empty_field: a top-level field of the parsed output is empty or missing in
  EMPTY_STREAK consecutive parsed outputs; fields watched are the schema's properties
  and any field seen filled before.
- length_collapse: the median output length of the last WINDOW succeeded items is
  below 30% of the median over the earlier ones (at least WINDOW of them).
- error_surge: one error kind makes up at least 30% of the last WINDOW items, with at
  least MIN_FAILURES of them, while its share before the window was under a third of that.
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from promptlab.checks.validation import extract_json
from promptlab.records import AlertRecord

#: Items per sliding window (per variant).
WINDOW = 50
#: Fewest non-completing items (or items of one error kind) in a window that can alert.
MIN_FAILURES = 10
#: The window's failure share must exceed both FAILURE_FACTOR x baseline and
#: baseline + FAILURE_MARGIN.
FAILURE_FACTOR = 3.0
FAILURE_MARGIN = 0.20
#: Consecutive parsed outputs with a field empty or missing before it is reported.
EMPTY_STREAK = 20
#: The window's median length below this share of the earlier median is a collapse.
LENGTH_RATIO = 0.30
#: Share of the window one error kind must reach to be a surge.
SURGE_SHARE = 0.30
#: An open alert clears only once its figure is back past this share of the threshold
#: (hysteresis: a rate hovering at the threshold is one episode, not many).
HOLD = 0.5
#: Log-spaced buckets of the earlier-lengths histogram: 5% wide, so a median is exact
#: to within 5%, which is far finer than the 30% threshold.
_BUCKET_BASE = math.log(1.05)

#: Check statuses that count as an item that did not complete.
NOT_COMPLETED_CHECKS = frozenset({"invalid", "truncated"})


class AlertKind(StrEnum):
    FAILURE_RATE = "failure_rate"
    EMPTY_FIELD = "empty_field"
    LENGTH_COLLAPSE = "length_collapse"
    ERROR_SURGE = "error_surge"


@dataclass(frozen=True)
class Observation:
    """What the detectors need of one finished item (cancelled items are not observed)."""

    seq: int
    variant: str
    status: str
    error_kind: str | None = None
    check_status: str | None = None
    #: Top-level fields of the parsed output with a non-empty value; None when the
    #: output was not parsed as a JSON object (no schema, invalid, failed).
    filled: frozenset[str] | None = None
    #: Characters of the output text; None for failed items.
    output_chars: int | None = None

    @property
    def completed(self) -> bool:
        return self.status == "succeeded" and self.check_status not in NOT_COMPLETED_CHECKS


def filled_fields(parsed: Any) -> frozenset[str] | None:
    """Top-level keys of a parsed object whose value is not null, "", [] or {}."""
    if not isinstance(parsed, Mapping):
        return None
    return frozenset(
        str(k) for k, v in parsed.items() if v is not None and v != "" and v != [] and v != {}
    )


#: Check statuses whose parsed output is watched for empty fields (a truncated one is
#: missing its tail for a reason of its own).
PARSED_CHECKS = frozenset({"valid", "repaired", "invalid"})
#: `observation_of` without the check's parsed value: it parses the output itself.
NOT_PARSED: Any = object()


def observation_of(
    seq: int,
    variant: str,
    status: str,
    error_kind: str | None,
    check_status: str | None,
    output_text: str | None,
    parsed: Any = NOT_PARSED,
) -> Observation:
    """The observation of one final row; `parsed` (the check's value, None when it found
    no JSON) spares parsing the output again."""
    filled = None
    if status == "succeeded" and check_status in PARSED_CHECKS:
        if parsed is NOT_PARSED:
            parsed = None
            try:
                parsed, _repaired = extract_json(output_text or "")
            except Exception:  # noqa: BLE001 - no JSON in it: nothing to watch
                parsed = None
        filled = filled_fields(parsed)
    return Observation(
        seq=seq,
        variant=variant,
        status=status,
        error_kind=error_kind,
        check_status=check_status,
        filled=filled,
        output_chars=len(output_text) if output_text is not None else None,
    )


def schema_fields(schema: Mapping[str, Any] | None) -> frozenset[str]:
    """The top-level properties an output schema names (watched from the first item)."""
    props = (schema or {}).get("properties")
    return frozenset(props) if isinstance(props, Mapping) else frozenset()


@dataclass
class _Window:
    """The last WINDOW observations' flags and counts, plus totals of those before."""

    seqs: deque[int] = field(default_factory=deque)
    failed: deque[bool] = field(default_factory=deque)
    kinds: deque[str | None] = field(default_factory=deque)
    failures: int = 0
    kind_counts: dict[str, int] = field(default_factory=dict)
    before: int = 0
    before_failures: int = 0
    before_kinds: dict[str, int] = field(default_factory=dict)

    def push(self, seq: int, failed: bool, kind: str | None) -> None:
        self.seqs.append(seq)
        self.failed.append(failed)
        self.kinds.append(kind)
        self.failures += failed
        if kind is not None:
            self.kind_counts[kind] = self.kind_counts.get(kind, 0) + 1
        if len(self.seqs) > WINDOW:
            self.seqs.popleft()
            old_failed, old_kind = self.failed.popleft(), self.kinds.popleft()
            self.failures -= old_failed
            self.before += 1
            self.before_failures += old_failed
            if old_kind is not None:
                self.kind_counts[old_kind] -= 1
                self.before_kinds[old_kind] = self.before_kinds.get(old_kind, 0) + 1

    @property
    def full(self) -> bool:
        return len(self.seqs) == WINDOW


@dataclass
class _Lengths:
    """The last WINDOW output lengths (sorted copy for the median) and a histogram before."""

    recent: deque[int] = field(default_factory=deque)
    ordered: list[int] = field(default_factory=list)
    seqs: deque[int] = field(default_factory=deque)
    buckets: dict[int, int] = field(default_factory=dict)
    before: int = 0
    earlier_median: float | None = None

    def push(self, seq: int, chars: int) -> None:
        self.recent.append(chars)
        self.seqs.append(seq)
        bisect.insort(self.ordered, chars)
        if len(self.recent) > WINDOW:
            old = self.recent.popleft()
            self.seqs.popleft()
            del self.ordered[bisect.bisect_left(self.ordered, old)]
            bucket = _bucket(old)
            self.buckets[bucket] = self.buckets.get(bucket, 0) + 1
            self.before += 1
            if self.before % WINDOW == 0:  # amortized: one scan per WINDOW items
                self.earlier_median = _histogram_median(self.buckets, self.before)

    def window_median(self) -> float:
        n = len(self.ordered)
        mid = n // 2
        if n % 2:
            return float(self.ordered[mid])
        return (self.ordered[mid - 1] + self.ordered[mid]) / 2


def _bucket(chars: int) -> int:
    return int(math.log(chars + 1) / _BUCKET_BASE)


def _histogram_median(buckets: Mapping[int, int], total: int) -> float:
    seen = 0
    for bucket in sorted(buckets):
        seen += buckets[bucket]
        if seen * 2 >= total:
            return math.exp(bucket * _BUCKET_BASE) - 1
    return 0.0


@dataclass
class _Variant:
    window: _Window = field(default_factory=_Window)
    lengths: _Lengths = field(default_factory=_Lengths)
    watched: set[str] = field(default_factory=set)
    empty_since: dict[str, int] = field(default_factory=dict)
    empty_streak: dict[str, int] = field(default_factory=dict)
    #: Conditions currently raised (kind, or kind:detail), so an episode alerts once.
    open: set[str] = field(default_factory=set)


class RunDetector:
    """Every detector over one run's stream; feed it `observe` in finishing order."""

    def __init__(
        self,
        run_id: str,
        expected_fields: Mapping[str, frozenset[str]] | None = None,
        now: Any = None,
    ) -> None:
        self.run_id = run_id
        self._expected = dict(expected_fields or {})
        self._variants: dict[str, _Variant] = {}
        self._now = now or (lambda: datetime.now(UTC))

    def observe(self, obs: Observation) -> list[AlertRecord]:
        v = self._variants.get(obs.variant)
        if v is None:
            v = self._variants[obs.variant] = _Variant(
                watched=set(self._expected.get(obs.variant, ()))
            )
        alerts: list[AlertRecord] = []
        failed = not obs.completed
        kind = obs.error_kind if obs.status == "failed" else None
        v.window.push(obs.seq, failed, kind)
        self._failure_rate(obs, v, alerts)
        if kind is not None or v.window.kind_counts:
            self._error_surge(obs, v, alerts)
        if obs.filled is not None:
            self._empty_fields(obs, v, alerts)
        if obs.status == "succeeded" and obs.output_chars is not None:
            v.lengths.push(obs.seq, obs.output_chars)
            self._length_collapse(obs, v, alerts)
        return alerts

    # ---- detectors ------------------------------------------------------------------

    def _failure_rate(self, obs: Observation, v: _Variant, alerts: list[AlertRecord]) -> None:
        w = v.window
        if not w.full or w.before < WINDOW:
            return
        baseline = w.before_failures / w.before
        rate = w.failures / WINDOW
        firing = w.failures >= MIN_FAILURES and rate > max(
            FAILURE_FACTOR * baseline, baseline + FAILURE_MARGIN
        )
        holding = rate > max(HOLD * FAILURE_FACTOR * baseline, baseline + HOLD * FAILURE_MARGIN)
        if self._edge(v, AlertKind.FAILURE_RATE, firing, holding):
            alerts.append(
                self._alert(
                    obs,
                    AlertKind.FAILURE_RATE,
                    f"{rate:.0%} of the last {WINDOW} items did not complete "
                    f"({w.failures}/{WINDOW}) against {baseline:.0%} over the "
                    f"{w.before} before",
                    w.seqs[0],
                )
            )

    def _error_surge(self, obs: Observation, v: _Variant, alerts: list[AlertRecord]) -> None:
        w = v.window
        if not w.full:
            return
        for kind, count in w.kind_counts.items():
            share = count / WINDOW
            before_share = w.before_kinds.get(kind, 0) / w.before if w.before else 0.0
            firing = (
                count >= MIN_FAILURES
                and share >= SURGE_SHARE
                and before_share < share / FAILURE_FACTOR
            )
            holding = share >= HOLD * SURGE_SHARE
            if self._edge(v, f"{AlertKind.ERROR_SURGE}:{kind}", firing, holding):
                alerts.append(
                    self._alert(
                        obs,
                        AlertKind.ERROR_SURGE,
                        f"error {kind} in {count} of the last {WINDOW} items ({share:.0%}) "
                        f"against {before_share:.0%} before",
                        w.seqs[0],
                    )
                )

    def _empty_fields(self, obs: Observation, v: _Variant, alerts: list[AlertRecord]) -> None:
        filled = obs.filled or frozenset()
        v.watched.update(filled)
        for name in v.watched:
            if name in filled:
                v.empty_streak[name] = 0
                self._edge(v, f"{AlertKind.EMPTY_FIELD}:{name}", False)
                continue
            streak = v.empty_streak.get(name, 0) + 1
            v.empty_streak[name] = streak
            if streak == 1:
                v.empty_since[name] = obs.seq
            if self._edge(v, f"{AlertKind.EMPTY_FIELD}:{name}", streak >= EMPTY_STREAK):
                alerts.append(
                    self._alert(
                        obs,
                        AlertKind.EMPTY_FIELD,
                        f"field {name!r} empty or missing in {streak} outputs in a row",
                        v.empty_since[name],
                    )
                )

    def _length_collapse(self, obs: Observation, v: _Variant, alerts: list[AlertRecord]) -> None:
        lengths = v.lengths
        earlier = lengths.earlier_median
        if earlier is None or len(lengths.recent) < WINDOW or earlier <= 0:
            return
        median = lengths.window_median()
        firing = median < LENGTH_RATIO * earlier
        holding = median < LENGTH_RATIO / HOLD * earlier
        if self._edge(v, AlertKind.LENGTH_COLLAPSE, firing, holding):
            alerts.append(
                self._alert(
                    obs,
                    AlertKind.LENGTH_COLLAPSE,
                    f"median output of the last {WINDOW} is {median:.0f} chars against "
                    f"{earlier:.0f} before ({median / earlier:.0%})",
                    lengths.seqs[0],
                )
            )

    # ---- helpers --------------------------------------------------------------------

    @staticmethod
    def _edge(v: _Variant, key: str, firing: bool, holding: bool | None = None) -> bool:
        """True when the condition `key` starts now. An open condition stays open while
        it `holding` (a looser bound), so figures hovering at a threshold alert once."""
        if key in v.open:
            if not (firing if holding is None else holding or firing):
                v.open.discard(key)
            return False
        if not firing:
            return False
        v.open.add(key)
        return True

    def _alert(self, obs: Observation, kind: AlertKind, what: str, first: int) -> AlertRecord:
        return AlertRecord(
            run_id=self.run_id,
            variant=obs.variant,
            kind=kind.value,
            message=f"{obs.variant}: {what} (items {first}..{obs.seq})",
            first_seq=first,
            last_seq=obs.seq,
            raised_at=self._now(),
        )


def detect(
    run_id: str,
    observations: Iterable[Observation],
    expected_fields: Mapping[str, frozenset[str]] | None = None,
    now: Callable[[], datetime] | None = None,
) -> Iterator[AlertRecord]:
    """Every alert over a whole stream (the after-run pass); `now` stamps them."""
    detector = RunDetector(run_id, expected_fields, now)
    for obs in observations:
        yield from detector.observe(obs)
