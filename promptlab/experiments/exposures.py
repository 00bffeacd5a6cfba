"""Exposures: the JSON Lines log of which unit was served which variant, and when."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from promptlab.data.jsonl import numbered_jsonl
from promptlab.data.lines import LineLimits
from promptlab.errors import ExperimentError
from promptlab.experiments.assignment import Assignment, assign
from promptlab.experiments.buckets import BUCKETS, unit_text
from promptlab.experiments.config import ExperimentConfig


@dataclass(frozen=True)
class Exposure:
    """One line of an exposure log: a unit was served a variant of a revision."""

    experiment: str
    revision: int
    unit: str
    variant: str
    bucket: int
    prompt_version_id: str
    time: datetime
    line: int = 0


def exposure_line(assignment: Assignment, config: ExperimentConfig, time: datetime) -> str:
    """One JSON Lines record (no newline): `unit` was served `variant` at `time`.

    Only units in the experiment are exposures: a unit outside the ramp, or of a killed
    experiment, is served control but is not part of the comparison.
    """
    if not assignment.in_experiment:
        raise ExperimentError(
            f"unit {assignment.unit!r} is not in experiment {config.name!r} "
            f"({assignment.reason}): not an exposure"
        )
    if time.tzinfo is None:
        raise ExperimentError("exposure time needs a timezone (use datetime.now(UTC))")
    return json.dumps(
        {
            "experiment": config.name,
            "revision": config.revision,
            "unit": assignment.unit,
            "variant": assignment.variant,
            "bucket": assignment.bucket,
            "prompt_version_id": assignment.prompt_version_id,
            "time": time.isoformat(),
        }
    )


#: An exposure line is seven short fields (services may log a few more); a log of a
#: billion bytes is some ten million exposures, imported in batches.
EXPOSURE_LOG = LineLimits(line_bytes=64 * 2**10, file_bytes=2**30, kind="an exposure log")


def read_exposures(
    path: Path, limits: LineLimits = EXPOSURE_LOG, shown: str | None = None
) -> Iterator[Exposure]:
    """Each exposure of a JSON Lines log, checked; a bad line raises naming its number
    and the file (as `shown`, when given: an upload's name where it was sent from).

    Fields beyond the seven an exposure has are ignored (services may log more).
    """
    lines = numbered_jsonl(path, limits, label="exposures", error=ExperimentError, shown=shown)
    for number, data in lines:
        yield _exposure(data, f"exposures {shown or path}, line {number}", number)


def _exposure(data: Mapping[str, Any], where: str, number: int) -> Exposure:
    texts = {}
    for key in ("experiment", "variant", "prompt_version_id"):
        value = data.get(key)
        if not isinstance(value, str) or not value:
            raise ExperimentError(f"{where}: {key}: expected text, got {value!r:.40}")
        texts[key] = value
    revision, bucket = data.get("revision"), data.get("bucket")
    if isinstance(revision, bool) or not isinstance(revision, int) or revision < 1:
        raise ExperimentError(
            f"{where}: revision: expected a positive integer, got {revision!r:.40}"
        )
    if isinstance(bucket, bool) or not isinstance(bucket, int) or not 0 <= bucket < BUCKETS:
        raise ExperimentError(f"{where}: bucket: expected 0 to {BUCKETS - 1}, got {bucket!r:.40}")
    try:
        unit = unit_text(data.get("unit"))
    except ExperimentError as exc:
        raise ExperimentError(f"{where}: unit: {exc}") from exc
    raw_time = data.get("time")
    try:
        time = datetime.fromisoformat(raw_time) if isinstance(raw_time, str) else None
    except ValueError:
        time = None
    if time is None:
        raise ExperimentError(f"{where}: time: expected an ISO-8601 time, got {raw_time!r:.40}")
    if time.tzinfo is None:
        raise ExperimentError(f"{where}: time: {raw_time!r} has no timezone (add Z or +00:00)")
    return Exposure(
        texts["experiment"],
        revision,
        unit,
        texts["variant"],
        bucket,
        texts["prompt_version_id"],
        time.astimezone(UTC),
        number,
    )


def check_exposure(exposure: Exposure, config: ExperimentConfig) -> None:
    """Refuse an exposure this revision could not have produced (wrong salt, variant, pin)."""
    names = [v.name for v in config.variants]
    if exposure.variant not in names:
        raise ExperimentError(
            f"revision {config.revision} of {config.name!r} has no variant "
            f"{exposure.variant!r} ({', '.join(names)})"
        )
    expected = assign(config, exposure.unit)
    if exposure.bucket != expected.bucket:
        raise ExperimentError(
            f"bucket {exposure.bucket} is not unit {exposure.unit!r}'s ({expected.bucket}) "
            f"under the salt of {config.name!r}"
        )
    if not expected.in_experiment:
        raise ExperimentError(
            f"unit {exposure.unit!r} is not in revision {config.revision} ({expected.reason})"
        )
    if exposure.variant != expected.variant:
        raise ExperimentError(
            f"unit {exposure.unit!r} gets {expected.variant!r} in revision {config.revision}, "
            f"not {exposure.variant!r}"
        )
    if exposure.prompt_version_id != expected.prompt_version_id:
        raise ExperimentError(
            f"prompt_version_id {exposure.prompt_version_id!r} is not the one {exposure.variant!r} "
            f"pins in revision {config.revision}"
        )
