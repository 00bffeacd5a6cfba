"""Experiments: sticky traffic splits of units (customers, sessions) over prompt variants.

Pure: no store, no network, no heavy imports, so a live service can `import promptlab`
and call `promptlab.assign(config, unit_id)` on an exported config file.

How a unit is assigned (the same answer in every process, on every machine):

- **Buckets.** `bucket_of(salt, unit)` hashes the experiment's salt and the unit id
  with SHA-256 into one of 10,000 buckets. The experiment's `allocation` gives each
  variant ranges of buckets, sized by the weights (largest remainder).
- **Minimal movement.** When weights change, `allocate(weights, previous)` lets every
  variant keep as many of its buckets as its new share allows; only freed buckets
  move, so the fewest units change variant, and buckets move only from variants that
  shrank to variants that grew.
- **Ramp.** A second, separate hash (`ramp_bucket_of`) decides whether a unit is in
  the experiment at all (`ramp_bucket < ramp * 100`). Raising the ramp only adds
  units; a unit already in keeps its variant. Units outside get the control variant
  with `in_experiment=False`.
- **Kill switch.** A killed experiment sends every unit to control,
  `in_experiment=False`, reason `killed`.

The experiment file (YAML, git-friendly) is what people write; `ExperimentConfig` is
a stored revision of it, with each variant's prompt version pinned and the bucket
allocation computed; `to_dict()` / `config_from_mapping()` are its exported form,
which carries everything `assign` needs.
"""

from __future__ import annotations

import hashlib
import json
import re
from bisect import bisect_right
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from fractions import Fraction
from functools import cached_property
from pathlib import Path
from typing import Any, NamedTuple

from promptlab.data.jsonl import numbered_jsonl
from promptlab.data.lines import LineLimits
from promptlab.errors import ExperimentError
from promptlab.yamlio import read_yaml

#: Buckets a unit hashes into: 0.01% of traffic each.
BUCKETS = 10_000
#: Joins the salt and the unit id before hashing; a byte no name or id contains.
SEPARATOR = "\x1f"
#: Marks the ramp hash apart from the variant hash, so the two are independent.
RAMP_TAG = "ramp"
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
#: Why a unit got its variant.
REASON_ASSIGNED = "assigned"
REASON_OUTSIDE_RAMP = "outside_ramp"
REASON_KILLED = "killed"

_FILE_KEYS = frozenset(
    {"name", "description", "salt", "mode", "unit_column", "ramp", "killed", "variants"}
)
#: Fields of a stored revision: an exported config has them; adding one back ignores them.
_REVISION_KEYS = frozenset({"revision", "allocation", "author", "created_at", "note"})
_VARIANT_KEYS = frozenset(
    {"name", "prompt", "prompt_version_id", "model", "params", "sampling", "weight", "control"}
)
_PARAM_RANGES = {"temperature": (0.0, 2.0), "top_p": (0.0, 1.0)}

BucketRange = tuple[int, int]
#: Variant name -> half-open bucket ranges [start, end), sorted, adjacent ones merged.
Allocation = dict[str, tuple[BucketRange, ...]]


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
        }


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
            self.name, self.description, self.salt, self.mode, self.unit_column,
            self.ramp, self.killed, self.variants,
        )  # fmt: skip

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


class Assignment(NamedTuple):
    """Which variant a unit gets, and why."""

    unit: str
    variant: str
    bucket: int
    prompt_version_id: str | None
    in_experiment: bool
    #: REASON_ASSIGNED (by its bucket), REASON_OUTSIDE_RAMP or REASON_KILLED.
    reason: str


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


# ---- hashing and assignment -------------------------------------------------------------


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


# ---- allocation -------------------------------------------------------------------------


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
    rest = ("description", "mode", "unit_column")
    out.extend(f"{key} changed" for key in rest if getattr(old, key) != getattr(new, key))
    return out or ["no change"]


# ---- the experiment file ----------------------------------------------------------------


def load_experiment_file(path: str | Path) -> ExperimentFile:
    """Read and fully check an experiment file; errors name the file and the field."""
    return parse_experiment_file(read_yaml(path, error=ExperimentError), source=str(path))


def parse_experiment_file(data: Any, source: str = "<experiment>") -> ExperimentFile:
    """An experiment file's data, checked whole.

    An exported config is accepted too: its revision fields (`revision`, `allocation`,
    `author`, `created_at`, `note`) describe a stored revision and are ignored here, and
    its variants' `prompt_version_id` pin those versions.
    """
    if not isinstance(data, Mapping):
        raise ExperimentError(f"{source}: expected a mapping with name and variants")
    unknown = sorted(set(data) - _FILE_KEYS - _REVISION_KEYS)
    if unknown:
        raise ExperimentError(f"{source}: unknown field(s) {', '.join(map(str, unknown))}")
    name = _text(data, "name", source, required=True)
    if not NAME_PATTERN.match(name):
        raise ExperimentError(
            f"{source}: name {name!r} is not allowed: use lowercase letters, digits, '.', '-' "
            "or '_' (starting with a letter or digit, at most 80 characters)"
        )
    salt = _text(data, "salt", source) or name
    mode = _text(data, "mode", source) or "split"
    if mode not in MODES:
        raise ExperimentError(f"{source}: mode: expected one of {', '.join(MODES)}, got {mode!r}")
    ramp = data.get("ramp", 100)
    if not _is_number(ramp) or not 0 <= ramp <= 100:
        raise ExperimentError(f"{source}: ramp: expected a percentage from 0 to 100, got {ramp!r}")
    if abs(ramp * 100 - round(ramp * 100)) > 1e-9:
        raise ExperimentError(f"{source}: ramp: at most two decimals (one bucket is 0.01%)")
    killed = data.get("killed", False)
    if not isinstance(killed, bool):
        raise ExperimentError(f"{source}: killed: expected true or false, got {killed!r}")
    raw_variants = data.get("variants")
    if not isinstance(raw_variants, list) or len(raw_variants) < 2:
        raise ExperimentError(f"{source}: variants: expected a list of two or more variants")
    if len(raw_variants) > MAX_VARIANTS:
        raise ExperimentError(
            f"{source}: variants: at most {MAX_VARIANTS} variants, got {len(raw_variants):,}"
        )
    variants = tuple(
        _variant(item, f"{source}: variants[{i}]") for i, item in enumerate(raw_variants)
    )
    seen: set[str] = set()
    for i, v in enumerate(variants):
        if v.name in seen:
            raise ExperimentError(f"{source}: variants[{i}].name: {v.name!r} is used twice")
        seen.add(v.name)
    controls = [v.name for v in variants if v.control]
    if len(controls) != 1:
        found = f" ({', '.join(controls)})" if controls else ""
        raise ExperimentError(
            f"{source}: variants: exactly one variant needs control: true, found "
            f"{len(controls)}{found}"
        )
    if sum(v.weight for v in variants) <= 0:
        raise ExperimentError(f"{source}: variants: at least one weight must be above 0")
    return ExperimentFile(
        name=name,
        description=_text(data, "description", source) or "",
        salt=salt,
        mode=mode,
        unit_column=_text(data, "unit_column", source) or None,
        ramp=ramp,
        killed=killed,
        variants=variants,
        source=source,
    )


def _variant(item: Any, where: str) -> ExperimentVariant:
    if not isinstance(item, Mapping):
        raise ExperimentError(f"{where}: expected a mapping with name, prompt and weight")
    unknown = sorted(set(item) - _VARIANT_KEYS)
    if unknown:
        raise ExperimentError(f"{where}: unknown field(s) {', '.join(map(str, unknown))}")
    name = _text(item, "name", where, required=True)
    if not VARIANT_PATTERN.match(name):
        raise ExperimentError(
            f"{where}.name: {name!r} is not allowed: use letters, digits, '.', '-' or '_' "
            "(at most 64 characters)"
        )
    prompt = _text(item, "prompt", where, required=True)
    version_id = _text(item, "prompt_version_id", where)
    if version_id is not None and not version_id.startswith("sha256:"):
        raise ExperimentError(
            f"{where}.prompt_version_id: expected 'sha256:...', got {version_id!r}"
        )
    model = _text(item, "model", where)
    if model is not None:
        endpoint, colon, model_name = model.partition(":")
        if not colon or not endpoint.strip() or not model_name.strip():
            raise ExperimentError(f"{where}.model: expected 'endpoint:model' (like sim:fast)")
    weight: Any = item.get("weight")
    if not _is_number(weight) or not 0 <= weight <= MAX_WEIGHT:
        raise ExperimentError(
            f"{where}.weight: expected a number from 0 to {MAX_WEIGHT:,}, got {weight!r:.40}"
        )
    control = item.get("control", False)
    if not isinstance(control, bool):
        raise ExperimentError(f"{where}.control: expected true or false, got {control!r}")
    return ExperimentVariant(
        name=name,
        prompt=prompt,
        weight=weight,
        control=control,
        prompt_version_id=version_id,
        model=model,
        params=_params(item.get("params"), f"{where}.params"),
        sampling=check_sampling(item.get("sampling"), f"{where}.sampling"),
    )


def _params(value: Any, where: str) -> dict[str, Any]:
    """temperature / top_p / max_tokens, with the ranges a template's params have."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ExperimentError(f"{where}: expected a mapping of temperature, top_p, max_tokens")
    unknown = sorted(set(value) - {*_PARAM_RANGES, "max_tokens"})
    if unknown:
        raise ExperimentError(
            f"{where}: unknown {', '.join(map(str, unknown))}; allowed: temperature, top_p, "
            "max_tokens"
        )
    for key, (low, high) in _PARAM_RANGES.items():
        if key in value and (not _is_number(value[key]) or not low <= value[key] <= high):
            raise ExperimentError(
                f"{where}.{key}: expected a number from {low} to {high}, got {value[key]!r}"
            )
    tokens = value.get("max_tokens")
    if "max_tokens" in value and (
        isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1
    ):
        raise ExperimentError(f"{where}.max_tokens: expected a positive integer, got {tokens!r}")
    return dict(value)


def check_sampling(value: Any, where: str) -> dict[str, Any] | None:
    """A variant's `sampling` settings, checked as a run spec's (experiments/sampling.py)."""
    if value is None:
        return None
    from promptlab.errors import SpecError
    from promptlab.experiments.sampling import parse_sampling

    try:
        parse_sampling(value, where.removesuffix(".sampling"))
    except SpecError as exc:
        raise ExperimentError(str(exc)) from exc
    return dict(value)


def _text(data: Mapping[str, Any], key: str, where: str, required: bool = False) -> Any:
    value = data.get(key)
    if value is None:
        if required:
            raise ExperimentError(f"{where}: field {key!r} is required")
        return None
    if not isinstance(value, str) or (required and not value.strip()):
        raise ExperimentError(f"{where}: field {key!r} must be non-empty text, got {value!r:.40}")
    return value


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value == value


def _number(value: float) -> float:
    """70.0 as 70: what people wrote, in files and messages."""
    return int(value) if float(value).is_integer() else value


def _short(version_id: str | None) -> str:
    return version_id[:15] if version_id else "unpinned"


# ---- the exported config ----------------------------------------------------------------


def config_from_mapping(data: Any, source: str = "<config>") -> ExperimentConfig:
    """An exported config (`ExperimentConfig.to_dict()`, as YAML or JSON), checked whole.

    Beyond an experiment file it must carry `revision`, the `allocation` (covering every
    bucket exactly once) and each variant's `prompt_version_id`.
    """
    if isinstance(data, Mapping) and "allocation" not in data and "variants" in data:
        raise ExperimentError(
            f"{source}: no allocation: this is an experiment file, not an exported config; "
            "add it, then use `promptlab experiment export NAME -o FILE`"
        )
    experiment = parse_experiment_file(data, source)
    assert isinstance(data, Mapping)
    revision = data.get("revision")
    if isinstance(revision, bool) or not isinstance(revision, int) or revision < 1:
        raise ExperimentError(f"{source}: revision: expected a positive integer, got {revision!r}")
    for i, v in enumerate(experiment.variants):
        if v.prompt_version_id is None:
            raise ExperimentError(f"{source}: variants[{i}].prompt_version_id is required")
    allocation = _allocation(data.get("allocation"), experiment, source)
    created = data.get("created_at")
    if isinstance(created, str):
        try:
            created = datetime.fromisoformat(created)
        except ValueError as exc:
            raise ExperimentError(
                f"{source}: created_at: not an ISO-8601 time: {created!r}"
            ) from exc
    if not isinstance(created, datetime):
        raise ExperimentError(f"{source}: created_at: expected an ISO-8601 time")
    if created.tzinfo is None:
        created = created.replace(tzinfo=UTC)
    return ExperimentConfig(
        name=experiment.name,
        description=experiment.description,
        salt=experiment.salt,
        revision=revision,
        mode=experiment.mode,
        unit_column=experiment.unit_column,
        ramp=experiment.ramp,
        killed=experiment.killed,
        variants=experiment.variants,
        allocation=allocation,
        author=_text(data, "author", source) or "",
        created_at=created,
        note=_text(data, "note", source) or "",
    )


def _allocation(value: Any, experiment: ExperimentFile, source: str) -> Allocation:
    where = f"{source}: allocation"
    names = [v.name for v in experiment.variants]
    if not isinstance(value, Mapping) or set(value) != set(names):
        raise ExperimentError(f"{where}: expected bucket ranges for each of {', '.join(names)}")
    covered = 0
    spans: list[tuple[int, int, str]] = []
    allocation: Allocation = {}
    for name in names:
        ranges = value[name] or []
        if not isinstance(ranges, list):
            raise ExperimentError(f"{where}.{name}: expected a list of [start, end] ranges")
        checked = []
        for pair in ranges:
            if (
                not isinstance(pair, list | tuple)
                or len(pair) != 2
                or not all(isinstance(x, int) and not isinstance(x, bool) for x in pair)
                or not 0 <= pair[0] < pair[1] <= BUCKETS
            ):
                raise ExperimentError(
                    f"{where}.{name}: {pair!r:.40} is not a range [start, end) within 0..{BUCKETS}"
                )
            checked.append((pair[0], pair[1]))
            spans.append((pair[0], pair[1], name))
            covered += pair[1] - pair[0]
        allocation[name] = tuple(sorted(checked))
    spans.sort()
    for (_, end, first), (start, _, second) in zip(spans, spans[1:], strict=False):
        if start < end:
            raise ExperimentError(f"{where}: ranges of {first} and {second} overlap at {start}")
    if covered != BUCKETS:
        raise ExperimentError(f"{where}: covers {covered} buckets, not all {BUCKETS}")
    return allocation


def load_experiment_config(path: str | Path) -> ExperimentConfig:
    """An exported config file (YAML or JSON) read and checked: what `assign` takes."""
    return config_from_mapping(read_yaml(path, error=ExperimentError), source=str(path))


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


# ---- exposures --------------------------------------------------------------------------


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


def read_exposures(path: Path, limits: LineLimits = EXPOSURE_LOG) -> Iterator[Exposure]:
    """Each exposure of a JSON Lines log, checked; a bad line raises naming its number.

    Fields beyond the seven an exposure has are ignored (services may log more).
    """
    for number, data in numbered_jsonl(path, limits, label="exposures", error=ExperimentError):
        yield _exposure(data, f"exposures {path}, line {number}", number)


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
        texts["experiment"], revision, unit, texts["variant"], bucket,
        texts["prompt_version_id"], time.astimezone(UTC), number,
    )  # fmt: skip


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
