"""Declarative run specs (YAML): dataset, variants, limits, retry policy, inline endpoints.

Parsing checks each field as written; what the fields name (endpoints, prompt versions,
the dataset's rows) is checked when a run is prepared (engine/prepare.py).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from promptlab.data.shards import ShardSpec, parse_shards
from promptlab.engine.limiter import Limits
from promptlab.engine.retry import RetryPolicy
from promptlab.engine.spec_endpoints import parse_endpoints, parse_limits, positive_int
from promptlab.errors import ConfigError, ExperimentError, SpecError, TemplateError
from promptlab.experiments import config_from_mapping
from promptlab.experiments.sampling import parse_sampling
from promptlab.prompts.templates import normalize_params
from promptlab.providers.config import EXECUTORS, parse_model_ref
from promptlab.records.family import FamilyError, parse_family
from promptlab.schedules.cron import check_cron
from promptlab.scoring.crosscheck import TOP_LOGPROBS, CrossCheck, with_crosscheck
from promptlab.scoring.scorers import Scorer, parse_scorers
from promptlab.yamlio import parse_yaml, read_yaml

#: The spec fields only a trusted caller may set (see parse_spec): `promptlab batch`'s
#: endpoints, what a judge's run scores (promptlab/scoring/judges.py), and the
#: cross-checked run a validation run weighs (promptlab/scoring/crossruns.py).
LOCAL_ENDPOINTS = "local_endpoints"
JUDGING = "judging"
VALIDATING = "validating"
SPEC_FIELDS = frozenset(
    {
        "name", "dataset", "variants", "repeats", "limits", "retry", "endpoints", "limit_rows",
        "experiment", "mode", "unit_column", "skip_invalid_rows", "reask", "executor",
        "schedule", "after", "expected", "scorers", "crosscheck", "history", "shards",
        "metrics", "planned_units",
    }
)  # fmt: skip
#: How an experiment's variants share a dataset's rows (see promptlab/experiments/config.py).
MODES = ("split", "all")
#: An imported dataset's name (promptlab/data/datasets.py NAME_PATTERN); in a spec, a bare
#: name has no file suffix, and `{name: NAME}` takes any (a name with a dot).
DATASET_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,79}$")
VARIANT_FIELDS = frozenset(
    {
        "name", "prompt", "messages", "model", "params", "params_from", "output_schema",
        "rules", "requests", "id_field", "sampling",
    }
)  # fmt: skip
#: `requests: as_written`: each dataset line is a request (see promptlab/data/batchfile.py).
AS_WRITTEN = "as_written"
#: Where a variant's record keeps `params_from` (param -> dataset column) among its params.
PARAM_COLUMNS_KEY = "columns"
#: Request params a variant may set on top of its template's.
VARIANT_PARAMS = frozenset({"temperature", "top_p", "max_tokens"})
DATASET_SUFFIXES = (".csv", ".jsonl", ".ndjson")
#: Most times a spec may send each (row, variant): sampling the same prompt a thousand
#: times is already a study of its own; more is a typo that would plan billions of items.
MAX_REPEATS = 1_000
#: Most runs one run may come after (`after:`); a longer list is a pipeline to split.
MAX_AFTER = 20
#: Longest run name `after:` may give (names are free text, shown on every page).
MAX_RUN_NAME_CHARS = 200


@dataclass(frozen=True)
class VariantSpec:
    """One variant as written: a registry reference or inline messages, a model, params."""

    name: str
    prompt: str | None = None
    messages: tuple[Mapping[str, Any], ...] | None = None
    model: str | None = None
    params: Mapping[str, Any] = field(default_factory=dict)
    output_schema: Mapping[str, Any] | None = None
    #: Business rules over the parsed output (promptlab.checks.rules), inline variants only.
    rules: tuple[Mapping[str, Any], ...] | None = None
    #: Params read per row from dataset columns (param -> column), e.g. max_tokens.
    params_from: Mapping[str, str] = field(default_factory=dict)
    #: How temperature or top_p moves over the batch (promptlab/experiments/sampling.py).
    sampling: Mapping[str, Any] | None = None
    #: Each dataset line is a request sent as written; its id is in `id_field`.
    as_written: bool = False
    id_field: str = "custom_id"


#: Most follow-up turns a run spec may ask for per item (`reask`).
MAX_REASKS = 3


@dataclass(frozen=True)
class RunSpec:
    """A whole run: what to send, to whom, how fast, and how to retry."""

    name: str
    #: A CSV or JSONL file, or None when `dataset_name` names an imported dataset.
    dataset: Path | None
    variants: tuple[VariantSpec, ...]
    repeats: int = 1
    limit_rows: int | None = None
    limits: Mapping[str, Limits] = field(default_factory=dict)
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    endpoints: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    #: The spec as plain data (dataset path made absolute), stored with the run.
    raw: Mapping[str, Any] = field(default_factory=dict)
    #: An imported dataset (promptlab/data/datasets.py) instead of a file.
    dataset_name: str | None = None
    #: The experiment's full config (as exported), when the variants come from one.
    experiment: Mapping[str, Any] | None = None
    #: `split`: each row to its unit's one variant; `all`: every row to every variant.
    mode: str = "all"
    #: The dataset column holding the unit id (user, session) in a split run.
    unit_column: str | None = None
    #: Plan only the rows every variant's template accepts (the others get no items).
    skip_invalid_rows: bool = False
    #: Follow-up turns per item when an output fails its schema check (not truncated):
    #: the conversation, the answer and its errors go back once more (0: never).
    reask: int = 0
    #: Endpoints from `promptlab batch`'s command line (`--base-url`, `--rpm`, ...),
    #: fields as in the providers file, never a key: stored so a resume finds them.
    local_endpoints: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    #: Where every endpoint's calls are made, over what the providers file says:
    #: `local` (this process) or `celery` (the workers; promptlab/distributed/).
    executor: str | None = None
    #: A cron expression (UTC): the spec is a schedule, submitted when it falls due
    #: (promptlab/schedules/), not a run to start now.
    schedule: str | None = None
    #: Names of runs this one comes after: it waits until the newest run of each name
    #: has completed, and is skipped when one fails (promptlab/engine/dependencies.py).
    after: tuple[str, ...] = ()
    #: The dataset column holding each row's expected answer, and how outputs are scored
    #: against it (promptlab/scoring/): every finished result is scored when the run ends.
    expected: str | None = None
    scorers: tuple[Scorer, ...] = ()
    #: A judge's run: the run and scorer its answers score, and the answer's field.
    judging: Mapping[str, Any] | None = None
    #: Each row through several models, their answers fused (promptlab/scoring/).
    crosscheck: CrossCheck | None = None
    #: Replay a conversation log a user turn an item (data/conversations.py), with the
    #: conversation `logged` or `generated` by the model itself (engine/chains.py).
    history: str | None = None
    #: A replay's context shards: summary prompt and TTL (data/shards.py).
    shards: ShardSpec = field(default_factory=ShardSpec)
    #: A cross-check's validation run: the run whose models its answers weigh.
    validating: str | None = None

    @property
    def split(self) -> bool:
        return self.mode == "split"

    @property
    def top_logprobs(self) -> int | None:
        """Log-probabilities asked per token: a cross-check measuring its entropy gap."""
        check = self.crosscheck
        return TOP_LOGPROBS if check is not None and check.entropy_gap is not None else None

    @property
    def dataset_label(self) -> str:
        """How the dataset is named in messages: its file, or `dataset NAME`."""
        return f"dataset {self.dataset_name}" if self.dataset_name else f"dataset {self.dataset}"


def load_spec(path: str | Path) -> RunSpec:
    """Read and check a YAML run spec; relative dataset paths are relative to the file."""
    spec_path = Path(path)
    data = read_yaml(spec_path, error=SpecError)
    return parse_spec(data, base_dir=spec_path.parent, default_name=spec_path.stem)


def parse_spec_text(
    text: str, *, base_dir: Path | None = None, dataset_root: Path | None = None
) -> RunSpec:
    """A spec from YAML text (as pasted in the app); relative paths are from `base_dir`.

    With `dataset_root`, the dataset must lie inside that folder (symlinks resolved): a
    spec pasted into a shared app cannot read other files of the server.
    """
    data = parse_yaml(text, where="run spec", error=SpecError)
    return parse_spec(data, base_dir=base_dir, dataset_root=dataset_root)


def parse_spec(
    data: Any,
    *,
    base_dir: Path | None = None,
    default_name: str = "run",
    dataset_root: Path | None = None,
    trusted: bool = False,
) -> RunSpec:
    """Check a spec given as plain data (as read from YAML or stored with a run).

    Only a `trusted` spec (built by `promptlab batch` from its command line, or stored
    with a run, which only a submit writes) may carry `local_endpoints`: endpoints with
    any address and key variable, like the providers file's. A pasted or file spec
    cannot (README, "Security").
    """
    if not isinstance(data, Mapping):
        raise SpecError("run spec: expected a mapping at the top level")
    allowed = SPEC_FIELDS | ({LOCAL_ENDPOINTS, JUDGING, VALIDATING} if trusted else set())
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise SpecError(f"run spec: unknown field(s) {', '.join(unknown)}")
    if "name" in data and not isinstance(data["name"], str):
        raise SpecError(f"run spec: 'name' must be a string, got {data['name']!r}")
    dataset, dataset_name = _dataset(data.get("dataset"), base_dir, dataset_root)
    experiment, mode, unit_column = _experiment(data)
    skip_invalid_rows, reask = _row_flags(data)
    variants_data: Any = data.get("variants")
    if experiment is not None:
        if "variants" in data:
            raise SpecError("run spec: give 'experiment' or 'variants', not both")
        variants_data = experiment_variants(experiment)
    if not isinstance(variants_data, list) or not variants_data:
        raise SpecError("run spec: 'variants' must be a non-empty list")
    crosscheck, variants_data, data = with_crosscheck(
        data, variants_data, lambda value: _dataset(value, base_dir, dataset_root)
    )
    variants = tuple(_variant(v, i) for i, v in enumerate(variants_data))
    names = [v.name for v in variants]
    if len(set(names)) != len(names):
        raise SpecError(f"variants: names must be unique, got {names}")
    repeats = positive_int(data.get("repeats", 1), "repeats")
    if repeats > MAX_REPEATS:
        raise SpecError(f"repeats: at most {MAX_REPEATS:,}, got {repeats:,}")
    limit_rows = data.get("limit_rows")
    if limit_rows is not None:
        limit_rows = positive_int(limit_rows, "limit_rows")
    limits = parse_limits(data.get("limits") or {})
    try:
        retry = RetryPolicy.from_mapping(data.get("retry"))
    except ConfigError as exc:
        raise SpecError(str(exc)) from exc
    endpoints = parse_endpoints(data.get("endpoints") or {})
    local_endpoints = _local_endpoints(data.get(LOCAL_ENDPOINTS) or {})
    # Stored as JSON with the run: YAML dates and the like become their text.
    # An imported dataset is stored as {name: NAME}: read back (resume) it means the same.
    stored_dataset: Any = str(dataset) if dataset is not None else {"name": dataset_name}
    raw = json.loads(json.dumps({**data, "dataset": stored_dataset}, default=str))
    return RunSpec(
        name=raw.get("name") or default_name,
        dataset=dataset,
        dataset_name=dataset_name,
        experiment=experiment,
        mode=mode,
        unit_column=unit_column,
        skip_invalid_rows=skip_invalid_rows,
        reask=reask,
        variants=variants,
        repeats=repeats,
        limit_rows=limit_rows,
        limits=limits,
        retry=retry,
        endpoints=endpoints,
        raw=raw,
        local_endpoints=local_endpoints,
        executor=_executor(data.get("executor")),
        crosscheck=crosscheck,
        history=_history(data.get("history")),
        shards=_shards(data),
        **_schedule_and_scoring(data),
    )


def _schedule_and_scoring(data: Mapping[str, Any]) -> dict[str, Any]:
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


def _history(value: Any) -> str | None:
    if value not in (None, "logged", "generated"):
        raise SpecError(
            "history: logged (a turn sent with the conversation as logged) or generated "
            f"(with the model's own earlier answers), got {value!r}"
        )
    return value


def _shards(data: Mapping[str, Any]) -> ShardSpec:
    if "shards" in data and data.get("history") is None:
        raise SpecError("shards: only a replay of a conversation log has shards (history:)")
    try:
        return parse_shards(data.get("shards"))
    except ValueError as exc:
        raise SpecError(str(exc)) from exc


def _row_flags(data: Mapping[str, Any]) -> tuple[bool, int]:
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


def _executor(value: Any) -> str | None:
    if value is not None and value not in EXECUTORS:
        raise SpecError(f"executor: one of {', '.join(EXECUTORS)}, got {value!r}")
    return str(value) if value is not None else None


def _local_endpoints(value: Any) -> dict[str, dict[str, Any]]:
    """A trusted caller's endpoints: names to fields (checked like the providers file's)."""
    if not isinstance(value, Mapping) or not all(isinstance(v, Mapping) for v in value.values()):
        raise SpecError(f"{LOCAL_ENDPOINTS}: expected a mapping of endpoint names to fields")
    return {str(name): dict(fields) for name, fields in value.items()}


def _dataset(
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


def _experiment(data: Mapping[str, Any]) -> tuple[Mapping[str, Any] | None, str, str | None]:
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


def experiment_variants(config: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Run-spec variants from an experiment's config: each pinned to its version id."""
    out = []
    for variant in config["variants"]:
        prompt_name = str(variant["prompt"]).split("@", 1)[0]
        spec_variant: dict[str, Any] = {
            "name": variant["name"],
            "prompt": f"{prompt_name}@{variant['prompt_version_id']}",
        }
        for key in ("model", "params", "sampling"):
            if variant.get(key):
                spec_variant[key] = variant[key]
        out.append(spec_variant)
    return out


def _variant(data: Any, index: int) -> VariantSpec:
    where = f"variants[{index}]"
    if not isinstance(data, Mapping):
        raise SpecError(f"{where}: expected a mapping")
    unknown = sorted(set(data) - VARIANT_FIELDS)
    if unknown:
        raise SpecError(f"{where}: unknown field(s) {', '.join(unknown)}")
    if "requests" in data:
        return _as_written_variant(data, index, where)
    prompt = data.get("prompt")
    messages = data.get("messages")
    if (prompt is None) == (messages is None):
        raise SpecError(f"{where}: give exactly one of 'prompt' (a registry ref) or 'messages'")
    if prompt is not None and not isinstance(prompt, str):
        raise SpecError(f"{where}.prompt: expected a reference like 'name@production'")
    if messages is not None and not isinstance(messages, list):
        raise SpecError(f"{where}.messages: expected a list of {{role, content}}")
    model = data.get("model")
    if model is not None:
        try:
            parse_model_ref(str(model))
        except ConfigError as exc:
            raise SpecError(f"{where}.model: {exc}") from exc
    params = data.get("params") or {}
    if not isinstance(params, Mapping) or set(params) - VARIANT_PARAMS:
        raise SpecError(f"{where}.params: allowed keys are {', '.join(sorted(VARIANT_PARAMS))}")
    try:  # the same ranges and types a template's params must have
        normalize_params({"model": "check:only", **params})
    except TemplateError as exc:
        raise SpecError(f"{where}.{exc}") from exc
    for key in ("output_schema", "rules"):
        if prompt is not None and data.get(key) is not None:
            raise SpecError(
                f"{where}.{key}: only for inline messages; a registry prompt carries its own"
            )
    sampling = data.get("sampling")
    if sampling is not None:
        parse_sampling(sampling, where)
    name = data.get("name") or prompt or f"variant-{index + 1}"
    return VariantSpec(
        name=str(name),
        prompt=prompt,
        messages=tuple(messages) if messages is not None else None,
        model=str(model) if model is not None else None,
        params=dict(params),
        output_schema=data.get("output_schema"),
        rules=tuple(data["rules"]) if isinstance(data.get("rules"), list) else data.get("rules"),
        params_from=_params_from(data.get("params_from"), where),
        sampling=dict(sampling) if sampling is not None else None,
    )


def _as_written_variant(data: Mapping[str, Any], index: int, where: str) -> VariantSpec:
    if data["requests"] != AS_WRITTEN:
        raise SpecError(f"{where}.requests: the only value is {AS_WRITTEN!r}")
    extra = sorted(
        set(data)
        & {"prompt", "messages", "params", "params_from", "output_schema", "rules", "sampling"}
    )
    if extra:
        raise SpecError(f"{where}: requests sent as written take no {', '.join(extra)}")
    model, id_field = data.get("model"), data.get("id_field", "custom_id")
    if not isinstance(model, str):
        raise SpecError(f"{where}.model: required ('endpoint:model') for requests as written")
    try:
        parse_model_ref(model)
    except ConfigError as exc:
        raise SpecError(f"{where}.model: {exc}") from exc
    if not isinstance(id_field, str) or not id_field:
        raise SpecError(f"{where}.id_field: expected a field name")
    return VariantSpec(
        name=str(data.get("name") or f"variant-{index + 1}"),
        model=model,
        as_written=True,
        id_field=id_field,
    )


def _params_from(value: Any, where: str) -> dict[str, str]:
    if value is None:
        return {}
    if (
        not isinstance(value, Mapping)
        or set(value) - VARIANT_PARAMS
        or not all(isinstance(c, str) and c for c in value.values())
    ):
        raise SpecError(
            f"{where}.params_from: map params ({', '.join(sorted(VARIANT_PARAMS))}) to "
            "dataset column names"
        )
    return {str(k): str(v) for k, v in value.items()}
