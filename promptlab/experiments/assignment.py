"""Assignment: which variant a unit gets in one revision of an experiment.

Pure: no store, no network, no heavy imports, so a live service can `import promptlab`
and call `promptlab.assign(config, unit_id)` on an exported config file.

A unit in the ramp (promptlab/experiments/buckets.py) gets the variant owning its
bucket; units outside the ramp get the control variant with `in_experiment=False`.
Raising the ramp only adds units; a unit already in keeps its variant. A killed
experiment (the kill switch) sends every unit to control, `in_experiment=False`,
reason `killed`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from promptlab.experiments.buckets import (
    BUCKETS,
    bucket_of,
    ramp_bucket_of,
    ramp_threshold,
    unit_text,
)
from promptlab.experiments.config import ExperimentConfig
from promptlab.experiments.parsing import config_from_mapping

#: Why a unit got its variant.
REASON_ASSIGNED = "assigned"
REASON_OUTSIDE_RAMP = "outside_ramp"
REASON_KILLED = "killed"


class Assignment(NamedTuple):
    """Which variant a unit gets, and why."""

    unit: str
    variant: str
    bucket: int
    prompt_version_id: str | None
    in_experiment: bool
    #: REASON_ASSIGNED (by its bucket), REASON_OUTSIDE_RAMP or REASON_KILLED.
    reason: str


def expected_shares(config: ExperimentConfig) -> dict[str, float]:
    """The share of units each variant gets in expectation, ramp and kill switch included.

    Estimates use it: counting the first rows of a dataset sorted by unit would say 100/0.
    """
    control = config.control.name
    if config.killed:
        return {v.name: float(v.name == control) for v in config.variants}
    inside = config.ramp / 100
    counts = config.bucket_counts()
    shares = {v.name: inside * counts.get(v.name, 0) / BUCKETS for v in config.variants}
    shares[control] += 1 - inside
    return shares


def assign(config: ExperimentConfig | Mapping[str, Any], unit_id: object) -> Assignment:
    """The variant `unit_id` gets in this revision of the experiment.

    `config` is an `ExperimentConfig` or its exported mapping (`to_dict()`, or an
    exported YAML/JSON file read as data). Parse a mapping once with
    `config_from_mapping` when assigning many units.
    """
    if not isinstance(config, ExperimentConfig):
        config = config_from_mapping(config)
    unit = unit_text(unit_id)
    bucket = bucket_of(config.salt, unit)
    control = config.control
    if config.killed:
        return Assignment(
            unit, control.name, bucket, control.prompt_version_id, False, REASON_KILLED
        )
    if ramp_bucket_of(config.salt, unit) >= ramp_threshold(config.ramp):
        return Assignment(
            unit, control.name, bucket, control.prompt_version_id, False, REASON_OUTSIDE_RAMP
        )
    variant = config.variant(config.variant_of_bucket(bucket))
    return Assignment(unit, variant.name, bucket, variant.prompt_version_id, True, REASON_ASSIGNED)
