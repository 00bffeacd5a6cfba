"""Experiment files and configs: what people write, and the stored revisions of it.

The experiment file (YAML, git-friendly) is what people write (`ExperimentFile`, read
by promptlab/experiments/parsing.py); `ExperimentConfig` is a stored revision of it,
with each variant's prompt version pinned and the bucket allocation computed
(promptlab/experiments/buckets.py). `to_dict()` / `config_from_mapping()` are its
exported form, which carries everything `assign` (promptlab/experiments/assignment.py)
needs; `export_yaml` writes it for live services.
"""

from __future__ import annotations

import json
import re
from bisect import bisect_right
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import cached_property
from typing import Any

from promptlab.errors import ExperimentError
from promptlab.experiments.buckets import Allocation

#: Experiment names follow the rule of prompt names (registry.NAME_PATTERN; not
#: imported from there because the registry brings DuckDB and Jinja2).
NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,79}$")
VARIANT_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
MODES = ("split", "all")
#: Variants an experiment may have: each should get a share of the 10,000 buckets a
#: comparison can use (100 gets each 1%), and every revision, run and page lists them all.
MAX_VARIANTS = 100
#: The largest weight. Weights are relative, so a million to 1 already gives the smaller
#: variant no bucket; larger ones (or infinity) only overflow the exact arithmetic.
MAX_WEIGHT = 1_000_000


@dataclass(frozen=True)
class ExperimentVariant:
    name: str
    #: The prompt reference as written (`ticket-triage@production`).
    prompt: str
    weight: float
    control: bool = False
    #: The version `prompt` resolved to when the revision was added; None in a file
    #: that does not pin it (adding the experiment pins it).
    prompt_version_id: str | None = None
    #: `endpoint:model` overriding the prompt's model; None keeps the prompt's.
    model: str | None = None
    #: temperature / top_p / max_tokens overriding the prompt's.
    params: Mapping[str, Any] = field(default_factory=dict)
    #: How temperature or top_p moves over a batch (checked by promptlab/experiments/sampling.py).
    sampling: Mapping[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "prompt": self.prompt}
        if self.prompt_version_id is not None:
            out["prompt_version_id"] = self.prompt_version_id
        if self.model is not None:
            out["model"] = self.model
        if self.params:
            out["params"] = dict(self.params)
        if self.sampling is not None:
            out["sampling"] = dict(self.sampling)
        out["weight"] = _number(self.weight)
        if self.control:
            out["control"] = True
        return out


@dataclass(frozen=True)
class ExperimentFile:
    """What an experiment file says, checked whole; not yet pinned or allocated."""

    name: str
    description: str
    salt: str
    mode: str
    unit_column: str | None
    ramp: float
    killed: bool
    variants: tuple[ExperimentVariant, ...]
    source: str = "<experiment>"
    #: The metrics compare decides on (`{primary, guardrails}`, promptlab/analysis/
    #: family.py) and the units per arm it is planned to end at; None: the defaults.
    metrics: Mapping[str, Any] | None = None
    planned_units: int | None = None
    #: A guarded rollout of one variant (promptlab/experiments/rollout.py), as data.
    rollout: Mapping[str, Any] | None = None

    @property
    def weights(self) -> dict[str, float]:
        return {v.name: v.weight for v in self.variants}

    def content(self) -> dict[str, Any]:
        """What the author decides, as plain data: equal content means nothing changed."""
        return {
            "name": self.name,
            "description": self.description,
            "salt": self.salt,
            "mode": self.mode,
            "unit_column": self.unit_column,
            "ramp": _number(self.ramp),
            "killed": self.killed,
            "variants": [v.to_dict() for v in self.variants],
        } | self.analysis()

    def analysis(self) -> dict[str, Any]:
        """`metrics` and `planned_units`, when the file declares them."""
        out: dict[str, Any] = {}
        if self.metrics is not None:
            out["metrics"] = dict(self.metrics)
        if self.planned_units is not None:
            out["planned_units"] = self.planned_units
        if self.rollout is not None:
            out["rollout"] = dict(self.rollout)
        return out


@dataclass(frozen=True)
class ExperimentConfig:
    """One stored revision of an experiment: everything `assign` needs, and who made it."""

    name: str
    description: str
    salt: str
    revision: int
    mode: str
    unit_column: str | None
    ramp: float
    killed: bool
    variants: tuple[ExperimentVariant, ...]
    allocation: Allocation
    author: str
    created_at: datetime
    note: str = ""
    metrics: Mapping[str, Any] | None = None
    planned_units: int | None = None
    rollout: Mapping[str, Any] | None = None

    @property
    def control(self) -> ExperimentVariant:
        return next(v for v in self.variants if v.control)

    @property
    def weights(self) -> dict[str, float]:
        return {v.name: v.weight for v in self.variants}

    def variant(self, name: str) -> ExperimentVariant:
        for v in self.variants:
            if v.name == name:
                return v
        known = ", ".join(v.name for v in self.variants)
        raise ExperimentError(f"experiment {self.name!r} has no variant {name!r} ({known})")

    def bucket_counts(self) -> dict[str, int]:
        """Buckets per variant (of BUCKETS): the share of in-experiment units each gets."""
        return {name: sum(e - s for s, e in ranges) for name, ranges in self.allocation.items()}

    def as_file(self) -> ExperimentFile:
        return ExperimentFile(
            self.name,
            self.description,
            self.salt,
            self.mode,
            self.unit_column,
            self.ramp,
            self.killed,
            self.variants,
            metrics=self.metrics,
            planned_units=self.planned_units,
            rollout=self.rollout,
        )

    def content(self) -> dict[str, Any]:
        return self.as_file().content()

    def to_dict(self) -> dict[str, Any]:
        """The exported form (YAML or JSON): `config_from_mapping` reads it back."""
        out = self.content()
        out["variants"] = [v.to_dict() for v in self.variants]
        out.update(
            revision=self.revision,
            allocation={
                name: [[start, end] for start, end in ranges]
                for name, ranges in self.allocation.items()
            },
            author=self.author,
            created_at=self.created_at.isoformat(),
            note=self.note,
        )
        return out

    @cached_property
    def _bucket_table(self) -> tuple[list[int], list[str]]:
        """Range starts, sorted, and the variant owning each range: bisect finds a bucket."""
        ranges = sorted(
            (start, name) for name, spans in self.allocation.items() for start, _ in spans
        )
        return [start for start, _ in ranges], [name for _, name in ranges]

    def variant_of_bucket(self, bucket: int) -> str:
        starts, names = self._bucket_table
        return names[bisect_right(starts, bucket) - 1]


def describe_changes(old: ExperimentConfig | None, new: ExperimentConfig) -> list[str]:
    """What a revision changed from the one before, one phrase each (for histories)."""
    if old is None:
        return ["created"]
    out = []
    if old.killed != new.killed:
        out.append("killed" if new.killed else "revived")
    if old.ramp != new.ramp:
        out.append(f"ramp {_number(old.ramp)}% -> {_number(new.ramp)}%")
    before, after = old.weights, new.weights
    for name in after:
        if name not in before:
            out.append(f"added {name} (weight {_number(after[name])})")
        elif before[name] != after[name]:
            out.append(f"{name} weight {_number(before[name])} -> {_number(after[name])}")
    out.extend(f"removed {name}" for name in before if name not in after)
    old_variants = {v.name: v for v in old.variants}
    for v in new.variants:
        was = old_variants.get(v.name)
        if was is not None and replace(was, weight=v.weight) != v:
            out.append(f"{v.name} changed ({v.prompt}, {_short(v.prompt_version_id)})")
    rest = ("description", "mode", "unit_column", "metrics", "planned_units")
    out.extend(f"{key} changed" for key in rest if getattr(old, key) != getattr(new, key))
    return out or ["no change"]


def _number(value: float) -> float:
    """70.0 as 70: what people wrote, in files and messages."""
    return int(value) if float(value).is_integer() else value


def _short(version_id: str | None) -> str:
    return version_id[:15] if version_id else "unpinned"


def export_yaml(config: ExperimentConfig) -> str:
    """The exported config as YAML, block style, bucket ranges written `[start, end]`."""
    import yaml  # only exports need the dumper

    class Dumper(yaml.SafeDumper):
        pass

    def represent_list(dumper: yaml.SafeDumper, value: list[Any]) -> yaml.SequenceNode:
        flat = all(isinstance(x, int | float | str) for x in value)
        return dumper.represent_sequence("tag:yaml.org,2002:seq", value, flow_style=flat)

    Dumper.add_representer(list, represent_list)
    header = (
        f"# Experiment {config.name}, revision {config.revision}, exported by promptlab.\n"
        "# Live services: promptlab.assign(promptlab.load_experiment_config(FILE), unit_id)\n"
    )
    body = yaml.dump(config.to_dict(), Dumper=Dumper, sort_keys=False, allow_unicode=True)
    return header + body


def config_json(config: ExperimentConfig) -> str:
    """The config as one canonical JSON text (how the store keeps a revision)."""
    return json.dumps(config.to_dict(), sort_keys=True)
