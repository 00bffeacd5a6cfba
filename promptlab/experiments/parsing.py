"""Reading experiment files and exported configs: every field checked, errors name it."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from promptlab.errors import ExperimentError
from promptlab.experiments.buckets import BUCKETS, Allocation
from promptlab.experiments.config import (
    MAX_VARIANTS,
    MAX_WEIGHT,
    MODES,
    NAME_PATTERN,
    VARIANT_PATTERN,
    ExperimentConfig,
    ExperimentFile,
    ExperimentVariant,
)
from promptlab.experiments.rollout import parse_rollout
from promptlab.yamlio import read_yaml

_FILE_KEYS = frozenset(
    {
        "name",
        "description",
        "salt",
        "mode",
        "unit_column",
        "ramp",
        "killed",
        "variants",
        "metrics",
        "planned_units",
        "rollout",
    }
)
#: Fields of a stored revision: an exported config has them; adding one back ignores them.
_REVISION_KEYS = frozenset({"revision", "allocation", "author", "created_at", "note"})
_VARIANT_KEYS = frozenset(
    {"name", "prompt", "prompt_version_id", "model", "params", "sampling", "weight", "control"}
)
_PARAM_RANGES = {"temperature": (0.0, 2.0), "top_p": (0.0, 1.0)}


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
    variants = _variants(data.get("variants"), source)
    plan = parse_rollout(
        data.get("rollout"), [(v.name, v.control) for v in variants], ramp, f"{source}: rollout"
    )
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
        metrics=_metrics(data.get("metrics"), source),
        planned_units=planned_units(data.get("planned_units"), f"{source}: planned_units"),
        rollout=plan.to_dict() if plan is not None else None,
    )


def _variants(raw_variants: Any, source: str) -> tuple[ExperimentVariant, ...]:
    """Two or more variants (at most MAX_VARIANTS), names unique, exactly one control,
    some weight above 0."""
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
    return variants


def _metrics(value: Any, source: str) -> dict[str, Any] | None:
    """`metrics: {primary, guardrails}`: what compare decides on (no scorer is known to
    an experiment, so only the built-in metrics)."""
    if value is None:
        return None
    from promptlab.records.family import FamilyError, parse_family  # assign needs none of it

    try:
        parse_family(value, [])
    except FamilyError as exc:
        raise ExperimentError(f"{source}: {exc}") from None
    return dict(value)


def planned_units(value: Any, where: str) -> int | None:
    """Units per arm a comparison is planned to end at: a positive integer, or None."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 10**9:
        raise ExperimentError(
            f"{where}: expected a whole number of units per arm from 1 to "
            f"1,000,000,000, got {value!r}"
        )
    return value


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
        metrics=experiment.metrics,
        planned_units=experiment.planned_units,
        rollout=experiment.rollout,
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
