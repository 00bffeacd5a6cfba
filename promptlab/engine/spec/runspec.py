"""Declarative run specs (YAML): dataset, variants, limits, retry policy, inline endpoints.

Parsing checks each field as written; what the fields name (endpoints, prompt versions,
the dataset's rows) is checked when a run is prepared (engine/plan/prepare.py). This
package is the spec as written: RunSpec and parse_spec here, the top-level fields'
checks in fields.py, the variants' in variants.py, `endpoints:` and `limits:` in
endpoints.py.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from promptlab.checks.plugged import CheckUse, parse_output_checks
from promptlab.conversations.shards import ShardSpec
from promptlab.engine.send.retry import RetryPolicy
from promptlab.engine.send.tokenbucket import Limits
from promptlab.engine.spec.endpoints import parse_endpoints, parse_limits, positive_int
from promptlab.engine.spec.fields import (
    DATASET_NAME,
    DATASET_SUFFIXES,
    JUDGING,
    LOCAL_ENDPOINTS,
    MAX_AFTER,
    MAX_REASKS,
    MAX_RUN_NAME_CHARS,
    MODES,
    VALIDATING,
    CacheSpec,
    DriftSpec,
    cache_field,
    dataset_field,
    drift_field,
    executor_field,
    experiment_field,
    history_field,
    local_endpoints_field,
    row_flags,
    schedule_and_scoring,
    shards_field,
)
from promptlab.engine.spec.variants import (
    AS_WRITTEN,
    PARAM_COLUMNS_KEY,
    VARIANT_FIELDS,
    VARIANT_PARAMS,
    VariantSpec,
    experiment_variants,
    parse_variant,
)
from promptlab.errors import ConfigError, SpecError
from promptlab.evaluation.crosscheck import TOP_LOGPROBS, CrossCheck, with_crosscheck
from promptlab.evaluation.scorers import Scorer
from promptlab.yamlio import parse_yaml, read_yaml

#: The module's face: the spec's types and parsers, and the constants other modules
#: (and tests) import from here, wherever they are defined.
__all__ = [
    "AS_WRITTEN",
    "DATASET_NAME",
    "DATASET_SUFFIXES",
    "JUDGING",
    "LOCAL_ENDPOINTS",
    "MAX_AFTER",
    "MAX_REASKS",
    "MAX_REPEATS",
    "MAX_RUN_NAME_CHARS",
    "MODES",
    "PARAM_COLUMNS_KEY",
    "SPEC_FIELDS",
    "VALIDATING",
    "VARIANT_FIELDS",
    "VARIANT_PARAMS",
    "RunSpec",
    "SpecError",
    "VariantSpec",
    "experiment_variants",
    "load_spec",
    "parse_spec",
    "parse_spec_text",
]

SPEC_FIELDS = frozenset(
    {
        "name",
        "dataset",
        "variants",
        "repeats",
        "limits",
        "retry",
        "endpoints",
        "limit_rows",
        "experiment",
        "mode",
        "unit_column",
        "skip_invalid_rows",
        "reask",
        "executor",
        "schedule",
        "after",
        "expected",
        "scorers",
        "crosscheck",
        "history",
        "shards",
        "metrics",
        "planned_units",
        "cache",
        "drift",
        "output_checks",
    }
)
#: Most times a spec may send each (row, variant): sampling the same prompt a thousand
#: times is already a study of its own; more is a typo that would plan billions of items.
MAX_REPEATS = 1_000


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
    #: has completed, and is skipped when one fails (promptlab/engine/plan/dependencies.py).
    after: tuple[str, ...] = ()
    #: The dataset column holding each row's expected answer, and how outputs are scored
    #: against it (promptlab/evaluation/): every finished result is scored when the run ends.
    expected: str | None = None
    scorers: tuple[Scorer, ...] = ()
    #: A judge's run: the run and scorer its answers score, and the answer's field.
    judging: Mapping[str, Any] | None = None
    #: Each row through several models, their answers fused (promptlab/evaluation/).
    crosscheck: CrossCheck | None = None
    #: Replay a conversation log a user turn an item (conversations/replay.py), with the
    #: conversation `logged` or `generated` by the model itself (engine/send/chains.py).
    history: str | None = None
    #: A replay's context shards: summary prompt and TTL (conversations/shards.py).
    shards: ShardSpec = field(default_factory=ShardSpec)
    #: A cross-check's validation run: the run whose models its answers weigh.
    validating: str | None = None
    #: How the run uses the response cache (`cache:`; promptlab/engine/send/cache.py).
    cache: CacheSpec = field(default_factory=CacheSpec)
    #: `drift:`: a semantic drift check when the run ends (None: none).
    drift: DriftSpec | None = None
    #: `output_checks:`: plugins' checks run on every answer (promptlab/checks/plugged.py).
    output_checks: tuple[CheckUse, ...] = ()

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
    _check_top_level(data, trusted)
    dataset, dataset_name = dataset_field(data.get("dataset"), base_dir, dataset_root)
    experiment, mode, unit_column = experiment_field(data)
    skip_invalid_rows, reask = row_flags(data)
    crosscheck, variants, data = _variants(
        data, experiment, lambda value: dataset_field(value, base_dir, dataset_root)
    )
    repeats, limit_rows = _sizes(data)
    limits = parse_limits(data.get("limits") or {})
    try:
        retry = RetryPolicy.from_mapping(data.get("retry"))
    except ConfigError as exc:
        raise SpecError(str(exc)) from exc
    endpoints = parse_endpoints(data.get("endpoints") or {})
    local_endpoints = local_endpoints_field(data.get(LOCAL_ENDPOINTS) or {})
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
        executor=executor_field(data.get("executor")),
        crosscheck=crosscheck,
        history=history_field(data.get("history")),
        shards=shards_field(data),
        cache=cache_field(data.get("cache")),
        drift=drift_field(data.get("drift")),
        output_checks=parse_output_checks(data.get("output_checks")),
        **schedule_and_scoring(data),
    )


def _check_top_level(data: Any, trusted: bool) -> None:
    """A mapping of known fields (a trusted caller's included), its name a string."""
    if not isinstance(data, Mapping):
        raise SpecError("run spec: expected a mapping at the top level")
    allowed = SPEC_FIELDS | ({LOCAL_ENDPOINTS, JUDGING, VALIDATING} if trusted else set())
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise SpecError(f"run spec: unknown field(s) {', '.join(unknown)}")
    if "name" in data and not isinstance(data["name"], str):
        raise SpecError(f"run spec: 'name' must be a string, got {data['name']!r}")


def _sizes(data: Mapping[str, Any]) -> tuple[int, int | None]:
    """`repeats` (at most MAX_REPEATS) and `limit_rows`, checked."""
    repeats = positive_int(data.get("repeats", 1), "repeats")
    if repeats > MAX_REPEATS:
        raise SpecError(f"repeats: at most {MAX_REPEATS:,}, got {repeats:,}")
    limit_rows = data.get("limit_rows")
    if limit_rows is not None:
        limit_rows = positive_int(limit_rows, "limit_rows")
    return repeats, limit_rows


def _variants(
    data: Mapping[str, Any],
    experiment: Mapping[str, Any] | None,
    dataset: Callable[[Any], tuple[Path | None, str | None]],
) -> tuple[CrossCheck | None, tuple[VariantSpec, ...], Mapping[str, Any]]:
    """The variants as written, or the experiment's; a cross-check's added (with the
    spec's data as it adds them), names unique."""
    variants_data: Any = data.get("variants")
    if experiment is not None:
        if "variants" in data:
            raise SpecError("run spec: give 'experiment' or 'variants', not both")
        variants_data = experiment_variants(experiment)
    if not isinstance(variants_data, list) or not variants_data:
        raise SpecError("run spec: 'variants' must be a non-empty list")
    crosscheck, variants_data, data = with_crosscheck(data, variants_data, dataset)
    variants = tuple(parse_variant(v, i) for i, v in enumerate(variants_data))
    names = [v.name for v in variants]
    if len(set(names)) != len(names):
        raise SpecError(f"variants: names must be unique, got {names}")
    return crosscheck, variants, data
