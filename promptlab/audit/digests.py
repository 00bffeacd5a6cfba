"""What a result event pins of the rows it describes: the `results` and `attempts`
columns digested, their values as stored (times as epoch microseconds, DOUBLEs as
floats), and the sha256 over them."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def epoch_us(at: datetime) -> int:
    """A timestamp as hashed: exact integer microseconds since 1970 (what TIMESTAMPTZ keeps)."""
    return (at - _EPOCH) // _MICROSECOND


#: The `results` columns a result event's `result_sha256` covers, in this order; JSON
#: columns as their stored text, `finished_at` as UTC microseconds since 1970.
RESULT_DIGEST_COLUMNS = (
    "idempotency_key",
    "run_id",
    "status",
    "error_kind",
    "error_message",
    "prompt_version_id",
    "endpoint",
    "model",
    "variant",
    "params",
    "output_text",
    "input_tokens",
    "output_tokens",
    "finish_reason",
    "model_version",
    "latency_ms",
    "cost_usd",
    "attempts",
    "finished_at",
    "check_status",
    "check_errors",
    "rule_status",
    "rule_errors",
)


def row_digest(values: Sequence[Any]) -> str:
    """sha256 of a stored row's digested values (RESULT_DIGEST_COLUMNS of a results row,
    ATTEMPT_DIGEST_COLUMNS of an attempts row), as a JSON array.

    A result event stores these instead of a copy of the rows: the trace view reads the
    rows themselves and checks them against the hashes, so an edited result is caught,
    and the log does not hold every output twice (bench/audit.py: the copy cost the most).
    """
    return hashlib.sha256(orjson.dumps(list(values))).hexdigest()


#: The `attempts` columns a result event's `attempt_sha256` covers (its answered
#: attempt's row), in this order; times as UTC microseconds since 1970.
ATTEMPT_DIGEST_COLUMNS = (
    "idempotency_key",
    "run_id",
    "attempt",
    "started_at",
    "ended_at",
    "outcome",
    "error_kind",
    "http_status",
    "error_message",
    "wait_ms",
    "wait_reason",
    "retry_after_s",
    "latency_ms",
    "reask",
)


def attempt_values(row: Any) -> tuple[Any, ...]:
    """An `AttemptRow`'s ATTEMPT_DIGEST_COLUMNS values as `attempts` stores them."""
    return (
        row.key,
        row.run_id,
        row.attempt,
        epoch_us(row.started_at),
        epoch_us(row.ended_at),
        row.outcome,
        row.error_kind,
        row.http_status,
        row.error_message,
        as_real(row.wait_ms),
        row.wait_reason,
        as_real(row.retry_after_s),
        as_real(row.latency_ms),
        bool(row.reask),
    )


def stored_values(row: Mapping[str, Any], columns: Sequence[str]) -> list[Any]:
    """A stored row's values of `columns` as the digests take them: times as epoch
    microseconds, DOUBLE columns as floats (see result_values, attempt_values)."""
    out = []
    for column in columns:
        value = row.get(column)
        if isinstance(value, datetime):
            value = epoch_us(value)
        elif column == "reask":
            value = bool(value)
        elif isinstance(value, int) and column in _REAL_COLUMNS and not isinstance(value, bool):
            value = float(value)
        out.append(value)
    return out


#: Columns stored as DOUBLE among the digested ones.
_REAL_COLUMNS = frozenset({"latency_ms", "cost_usd", "wait_ms", "retry_after_s"})


def as_real(value: float | None) -> float | None:
    """A DOUBLE column's value as DuckDB gives it back (a provider's int latency is read
    back as a float), so a digest taken before storing matches one taken after."""
    return None if value is None else float(value)
