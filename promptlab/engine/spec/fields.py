"""A run spec's top-level fields checked one by one: the dataset, the experiment, the row
flags, `after:`, the schedule and scoring, the replay's history and shards, the executor
and a trusted caller's endpoints (the variants are in engine/spec/variants.py)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from promptlab.conversations.shards import ShardSpec, parse_shards
from promptlab.errors import ExperimentError, SpecError
from promptlab.evaluation.scorers import parse_scorers
from promptlab.experiments import config_from_mapping
from promptlab.providers.config import EXECUTORS
from promptlab.records.family import FamilyError, parse_family
from promptlab.schedules.cron import check_cron

#: The spec fields only a trusted caller may set (see parse_spec): `promptlab batch`'s
#: endpoints, what a judge's run scores (promptlab/evaluation/judges.py), and the
#: cross-checked run a validation run weighs (promptlab/evaluation/crossruns.py).
LOCAL_ENDPOINTS = "local_endpoints"
JUDGING = "judging"
VALIDATING = "validating"
#: How an experiment's variants share a dataset's rows (see promptlab/experiments/config.py).
MODES = ("split", "all")
#: An imported dataset's name (promptlab/data/datasets.py NAME_PATTERN); in a spec, a bare
#: name has no file suffix, and `{name: NAME}` takes any (a name with a dot).
DATASET_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,79}$")
DATASET_SUFFIXES = (".csv", ".jsonl", ".ndjson")
#: Most follow-up turns a run spec may ask for per item (`reask`).
MAX_REASKS = 3
#: Most runs one run may come after (`after:`); a longer list is a pipeline to split.
MAX_AFTER = 20
#: Longest run name `after:` may give (names are free text, shown on every page).
MAX_RUN_NAME_CHARS = 200


def schedule_and_scoring(data: Mapping[str, Any]) -> dict[str, Any]:
    """`schedule`, `after`, `expected`, `scorers` and `metrics`, checked."""
    out: dict[str, Any] = {
        "after": _after(data.get("after")),
        "judging": data.get(JUDGING),
        "validating": data.get(VALIDATING),
    }
    if "schedule" in data:
        out["schedule"] = check_cron(data["schedule"])
    expected = data.get("expected")
    if expected is None:
        if "scorers" in data:
            raise SpecError("scorers: need `expected:`, the column holding the expected answer")
        _metrics(data, [])
        return out
    if not isinstance(expected, str) or not expected.strip():
        raise SpecError(f"expected: the dataset column holding the answer, got {expected!r}")
    scorers = parse_scorers(data.get("scorers"))
    _metrics(data, [s.name for s in scorers])
    return {**out, "expected": expected, "scorers": scorers}


def _metrics(data: Mapping[str, Any], scorer_names: list[str]) -> None:
    """`metrics:` (the primary and the guardrails compare's Holm family is): checked
    here, read from the stored spec by compare (promptlab/records/family.py)."""
    if "metrics" in data:
        try:
            parse_family(data["metrics"], scorer_names)
        except FamilyError as exc:
            raise SpecError(str(exc)) from exc
    if "planned_units" in data:
        from promptlab.experiments.parsing import planned_units

        try:
            planned_units(data["planned_units"], "planned_units")
        except ExperimentError as exc:
            raise SpecError(str(exc)) from exc


def history_field(value: Any) -> str | None:
    if value not in (None, "logged", "generated"):
        raise SpecError(
            "history: logged (a turn sent with the conversation as logged) or generated "
            f"(with the model's own earlier answers), got {value!r}"
        )
    return value


def shards_field(data: Mapping[str, Any]) -> ShardSpec:
    if "shards" in data and data.get("history") is None:
        raise SpecError("shards: only a replay of a conversation log has shards (history:)")
    try:
        return parse_shards(data.get("shards"))
    except ValueError as exc:
        raise SpecError(str(exc)) from exc


def row_flags(data: Mapping[str, Any]) -> tuple[bool, int]:
    """`skip_invalid_rows` and `reask`, checked."""
    skip_invalid_rows = data.get("skip_invalid_rows", False)
    if not isinstance(skip_invalid_rows, bool):
        raise SpecError(f"skip_invalid_rows: expected true or false, got {skip_invalid_rows!r}")
    reask = data.get("reask", 0)
    if isinstance(reask, bool) or not isinstance(reask, int) or not 0 <= reask <= MAX_REASKS:
        raise SpecError(f"reask: expected a whole number from 0 to {MAX_REASKS}, got {reask!r}")
    return skip_invalid_rows, reask


def _after(value: Any) -> tuple[str, ...]:
    """Run names, each once, in the order given."""
    if value is None:
        return ()
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not all(
        isinstance(n, str) and n.strip() and len(n) <= MAX_RUN_NAME_CHARS for n in names
    ):
        raise SpecError(
            f"after: expected a list of run names (each up to {MAX_RUN_NAME_CHARS} "
            f"characters), got {value!r}"
        )
    if len(names) > MAX_AFTER:
        raise SpecError(f"after: at most {MAX_AFTER} runs, got {len(names)}")
    return tuple(dict.fromkeys(n.strip() for n in names))


def executor_field(value: Any) -> str | None:
    if value is not None and value not in EXECUTORS:
        raise SpecError(f"executor: one of {', '.join(EXECUTORS)}, got {value!r}")
    return str(value) if value is not None else None


def local_endpoints_field(value: Any) -> dict[str, dict[str, Any]]:
    """A trusted caller's endpoints: names to fields (checked like the providers file's)."""
    if not isinstance(value, Mapping) or not all(isinstance(v, Mapping) for v in value.values()):
        raise SpecError(f"{LOCAL_ENDPOINTS}: expected a mapping of endpoint names to fields")
    return {str(name): dict(fields) for name, fields in value.items()}


def dataset_field(
    value: Any, base_dir: Path | None, dataset_root: Path | None
) -> tuple[Path | None, str | None]:
    """A file (a path with a suffix), or an imported dataset: `NAME` or `{name: NAME}`."""
    if isinstance(value, Mapping) and set(value) == {"name"}:
        value = value["name"]
        if not isinstance(value, str) or not DATASET_NAME.match(value):
            raise SpecError(f"dataset.name: not a dataset name: {value!r}")
        return None, value
    if not isinstance(value, str):
        raise SpecError("run spec: 'dataset' must name a CSV or JSONL file, or an imported dataset")
    if DATASET_NAME.match(value) and not Path(value).suffix:
        return None, value
    return _dataset_file(value, base_dir, dataset_root), None


def _dataset_file(value: str, base_dir: Path | None, dataset_root: Path | None) -> Path:
    dataset = Path(value)
    if not dataset.is_absolute() and base_dir is not None:
        dataset = (base_dir / dataset).resolve()
    if dataset.suffix.lower() not in DATASET_SUFFIXES:
        raise SpecError(
            f"dataset {dataset}: expected a .csv or .jsonl file, or an imported dataset "
            "(`dataset: NAME`, or `dataset: {name: NAME}` for a name with a dot; Parquet "
            "files are imported first with promptlab dataset import)"
        )
    if dataset_root is not None and not dataset.resolve().is_relative_to(dataset_root.resolve()):
        raise SpecError(
            f"dataset {value}: outside {dataset_root}; the app reads datasets "
            "only from the project's data folder"
        )
    return dataset


def experiment_field(data: Mapping[str, Any]) -> tuple[Mapping[str, Any] | None, str, str | None]:
    """The experiment's config, the mode and the unit column of a spec that runs one."""
    config = data.get("experiment")
    if config is None:
        if "mode" in data:
            raise SpecError("run spec: 'mode' needs an 'experiment'")
        replay_user = data.get("unit_column") if data.get("history") is not None else None
        if "unit_column" in data and replay_user is None:
            raise SpecError("run spec: 'unit_column' needs an 'experiment' (or a replay)")
        if replay_user is not None and (not isinstance(replay_user, str) or not replay_user):
            raise SpecError(f"unit_column: expected a column name, got {replay_user!r}")
        # A replay compares its versions per session, or per user: its log's user column.
        return None, "all", replay_user
    if not isinstance(config, Mapping):
        raise SpecError(
            "experiment: expected an experiment's name (resolved by the app and the CLI) or "
            "its exported config"
        )
    try:
        checked = config_from_mapping(config, source="experiment")
    except ExperimentError as exc:
        raise SpecError(str(exc)) from exc
    mode = data.get("mode", checked.mode)
    if mode not in MODES:
        raise SpecError(f"mode: one of {', '.join(MODES)}, got {mode!r}")
    unit_column = data.get("unit_column", checked.unit_column)
    if unit_column is not None and (not isinstance(unit_column, str) or not unit_column):
        raise SpecError(f"unit_column: expected a column name, got {unit_column!r}")
    if mode == "split" and not unit_column:
        raise SpecError(
            f"unit_column: a split run of experiment {checked.name} needs the dataset column "
            "holding the unit id (user, session)"
        )
    return checked.to_dict(), mode, unit_column


#: How a run uses the response cache (promptlab/engine/send/cache.py): `read` answers an
#: identical request from it, `write` keeps every eligible answer, `readwrite` both.
CACHE_MODES = ("off", "read", "write", "readwrite")


@dataclass(frozen=True)
class CacheSpec:
    """`cache:`: the mode, and whether requests above temperature 0 without a seed are
    cached too (`any_temperature`; by default only repeatable requests are)."""

    mode: str = "off"
    any_temperature: bool = False

    @property
    def reads(self) -> bool:
        return self.mode in ("read", "readwrite")

    @property
    def writes(self) -> bool:
        return self.mode in ("write", "readwrite")


def cache_field(value: Any) -> CacheSpec:
    """`cache: MODE` or `cache: {mode: MODE, any_temperature: true}`; YAML reads a bare
    `off` as false, which is off."""
    said = (
        f"cache: one of {', '.join(CACHE_MODES)}, or {{mode: MODE, any_temperature: "
        f"true}}, got {value!r}"
    )
    if value is None or value is False:
        return CacheSpec()
    if isinstance(value, Mapping):
        unknown = sorted(set(value) - {"mode", "any_temperature"})
        if unknown:
            raise SpecError(f"cache: unknown field(s) {', '.join(map(str, unknown))}")
        anyway = value.get("any_temperature", False)
        if not isinstance(anyway, bool):
            raise SpecError(f"cache.any_temperature: expected true or false, got {anyway!r}")
        return CacheSpec(cache_field(value.get("mode", "readwrite")).mode, anyway)
    if not isinstance(value, str) or value not in CACHE_MODES:
        raise SpecError(said)
    return CacheSpec(value)


#: The embedder a spec's `drift:` uses when it names none: offline, needing no key.
DEFAULT_DRIFT_MODEL = "sim:embed"


@dataclass(frozen=True)
class DriftSpec:
    """`drift:`: check the run's filled prompts for semantic drift when it ends
    (promptlab/evaluation/drift.py), with `model`'s embeddings; `threshold` None is each
    version's own `drift_threshold`, else the check's default."""

    model: str = DEFAULT_DRIFT_MODEL
    threshold: float | None = None
    #: A dataset whose rows' centroid is each version's anchor (None: its examples).
    reference: str | None = None


def drift_field(value: Any) -> DriftSpec | None:
    """`drift: true` or `drift: {model: ENDPOINT:MODEL, threshold: 0.4}`; absent or false:
    no check."""
    if value is None or value is False:
        return None
    if value is True:
        return DriftSpec()
    if not isinstance(value, Mapping):
        raise SpecError(f"drift: true, or {{model: ENDPOINT:MODEL, threshold: N}}, got {value!r}")
    unknown = sorted(set(value) - {"model", "threshold", "reference"})
    if unknown:
        raise SpecError(f"drift: unknown field(s) {', '.join(map(str, unknown))}")
    model = value.get("model", DEFAULT_DRIFT_MODEL)
    if not isinstance(model, str) or not re.fullmatch(r"[^:\s]+:\S+", model):
        raise SpecError(f"drift.model: expected ENDPOINT:MODEL, got {model!r}")
    threshold = value.get("threshold")
    if threshold is not None and (
        isinstance(threshold, bool)
        or not isinstance(threshold, int | float)
        or not 0 < threshold <= 2
    ):
        raise SpecError(
            f"drift.threshold: a cosine distance above 0 and at most 2, got {threshold!r}"
        )
    reference = value.get("reference")
    if reference is not None and not (isinstance(reference, str) and reference.strip()):
        raise SpecError(f"drift.reference: a dataset's name, got {reference!r}")
    return DriftSpec(model, None if threshold is None else float(threshold), reference)
