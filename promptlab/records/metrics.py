"""Metrics rows (run variants, prompt versions, imported logs), pairs and alerts.

Rows hold counts and rates; the rates' intervals are promptlab.analysis.intervals'
(statistics stay in analysis/, above the records)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from promptlab.records.rates import CheckRates, share, version_label


@dataclass(frozen=True)
class MetricsRow(CheckRates):
    """What one run variant, or one prompt version on one model, added up to.

    Run rows have `run_id` and `variant`; version rows (across runs) have neither and
    count the `runs` they come from. Counts are over final rows (results); latencies
    over succeeded ones. `completed` counts succeeded results whose output passed its
    check (valid, repaired or no schema) once results carry checks.
    """

    run_id: str | None
    variant: str | None
    prompt_name: str | None
    prompt_version: str | None
    prompt_version_id: str
    model: str
    runs: int
    finished: int
    succeeded: int
    failed: int
    cancelled: int
    #: Items of a run variant still pending or in flight (0 for version rows).
    open: int
    completed: int
    failed_by_kind: Mapping[str, int]
    latency_mean_ms: float | None
    latency_p50_ms: float | None
    latency_p90_ms: float | None
    latency_p95_ms: float | None
    latency_p99_ms: float | None
    input_tokens: int
    output_tokens: int
    cost_usd: float
    first_finished_at: datetime | None
    last_finished_at: datetime | None
    #: Succeeded results checked against an output schema or rules, and how their
    #: checks came out (the same counts as VariantSummary's; 0 before output checks).
    checked: int = 0
    valid: int = 0
    repaired: int = 0
    invalid: int = 0
    truncated: int = 0
    #: Checked outputs whose rules of severity error failed (or raised).
    rule_failed: int = 0
    #: Feedback (promptlab.data.feedback): impressions, and clicks counted at most once per
    #: impression of the same result (or unit); thumbs as given.
    impressions: int = 0
    clicks: int = 0
    thumbs_up: int = 0
    thumbs_down: int = 0
    #: Results answered from the response cache: counted above, cost 0, and left out of
    #: the latencies (they have none: nothing was sent).
    cache_hits: int = 0

    @property
    def ctr(self) -> float | None:
        """Click-through rate: clicks over impressions (None with no impression)."""
        return share(self.clicks, self.impressions)

    @property
    def completion_rate(self) -> float | None:
        return share(self.completed, self.finished)

    @property
    def label(self) -> str:
        """The variant, or `name@version` for a version row."""
        if self.variant is not None:
            return self.variant
        return version_label(self.prompt_name, self.prompt_version, self.prompt_version_id)


@dataclass(frozen=True)
class LogScore:
    """A named score sent as feedback events (`kind: score`) on one version's production
    requests: how many, from how many units, and their mean."""

    name: str
    scores: int
    units: int
    mean: float


@dataclass(frozen=True)
class LogMetricsRow:
    """What one prompt version's production requests (imported logs, live calls) added
    up to, with the feedback events about them (promptlab/store/log_outcomes.py).

    Rates are over the requests that say: completion over those whose log says whether
    they completed, live calls, and the requests of units a `completed` event names;
    CTR over impressions (requests with `clicked` set, and impression events), a click
    counted at most once per impression of its unit; latencies over those with a latency.
    """

    prompt_name: str | None
    prompt_version: str | None
    prompt_version_id: str
    requests: int
    latency_mean_ms: float | None
    latency_p50_ms: float | None
    latency_p90_ms: float | None
    latency_p95_ms: float | None
    latency_p99_ms: float | None
    #: Requests whose completion is known (see above), and how many completed.
    completion_known: int
    completed: int
    #: Impressions (requests whose log says whether they were clicked, and impression
    #: events), and the clicks on them.
    click_known: int
    clicks: int
    first_event_at: datetime | None
    last_event_at: datetime | None
    #: Each named score's events on the version, by name.
    scores: tuple[LogScore, ...] = ()

    @property
    def completion_rate(self) -> float | None:
        return share(self.completed, self.completion_known)

    @property
    def ctr(self) -> float | None:
        return share(self.clicks, self.click_known)

    @property
    def label(self) -> str:
        return version_label(self.prompt_name, self.prompt_version, self.prompt_version_id)


@dataclass(frozen=True)
class AlertRecord:
    """An anomaly seen in a run's results (promptlab.checks.anomalies): what, where, the figures."""

    run_id: str
    variant: str
    #: A promptlab.checks.anomalies.AlertKind value.
    kind: str
    #: One line: the variant, what was seen with its figures, the items it spans.
    message: str
    first_seq: int
    last_seq: int
    raised_at: datetime
