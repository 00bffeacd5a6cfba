"""`wb.experiments`: sticky splits of units over prompt variants, kept as revisions.

The rules (buckets, allocation, ramp, kill switch, exposures) are in
promptlab/experiments/; every change here is a new revision with its author, time and
note, and a change event in the audit trail.
"""

from __future__ import annotations

import builtins  # `list` below names a method: annotations say builtins.list
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

from promptlab.errors import (
    ConfigError,
    ExperimentError,
    RegistryError,
    StaleChangeError,
    moment,
)
from promptlab.experiments import (
    ExperimentConfig,
    ExperimentFile,
    Exposure,
    allocate,
    check_exposure,
    config_from_mapping,
    config_json,
    export_yaml,
    load_experiment_file,
    parse_experiment_file,
    read_exposures,
)
from promptlab.facades.context import Context
from promptlab.providers.config import check_model_ref, load_endpoints
from promptlab.store.experiments import AssignmentCount, ExperimentStore, StoredRevision

__all__ = ["AssignmentCount", "EXPOSURE_BATCH", "Experiments"]

#: Exposures checked and inserted at a time (all in one transaction).
EXPOSURE_BATCH = 50_000


class Experiments:
    """Add, read, change and export experiments; import and count their exposures."""

    def __init__(self, context: Context) -> None:
        self._context = context
        self._rows = ExperimentStore(context.store)
        #: Dataset rows split runs assigned, per experiment, revision, variant:
        #: `assignment_counts(experiment=, run_id=)`, see `ExperimentStore`.
        self.assignment_counts = self._rows.assignment_counts
        self._listeners: builtins.list[Callable[[ExperimentConfig], None]] = []

    def add(
        self,
        source: str | Path | Mapping[str, Any] | ExperimentFile,
        *,
        note: str = "",
        based_on: int | None = None,
    ) -> tuple[ExperimentConfig, bool]:
        """Add an experiment file (a path, its data, or a loaded one) as the next revision.

        Each variant's prompt reference is resolved and its version id pinned (a variant
        that gives `prompt_version_id` keeps that one). The allocation starts from the
        previous revision's, so only the buckets a weight change frees move. A file
        identical to the latest revision (pins included) creates nothing: `created` is
        False and the latest revision is returned. `based_on`: the revision the change
        was made on (0: none yet); a change on an older one is refused (StaleChangeError).
        """
        if isinstance(source, ExperimentFile):
            experiment = source
        elif isinstance(source, Mapping):
            experiment = parse_experiment_file(source)
        else:
            experiment = load_experiment_file(source)
        self._check_models(experiment)
        return self._save(self._pin_variants(experiment), note, based_on)

    def get(self, name: str, revision: int | None = None) -> ExperimentConfig:
        """One revision of `name` (the latest by default)."""
        rows = self._rows
        row = rows.latest(name) if revision is None else rows.revision(name, revision)
        if row is None:
            if revision is not None and rows.latest(name) is not None:
                raise ExperimentError(f"experiment {name!r} has no revision {revision}")
            raise ExperimentError(f"no experiment named {name!r}")
        return _stored_config(row)

    def history(self, name: str) -> builtins.list[ExperimentConfig]:
        """Every revision of `name`, newest first (`describe_changes` says what each changed)."""
        rows = self._rows.revisions(name)
        if not rows:
            raise ExperimentError(f"no experiment named {name!r}")
        return [_stored_config(row) for row in rows]

    def update(
        self,
        name: str,
        *,
        weights: Mapping[str, float] | None = None,
        ramp: float | None = None,
        killed: bool | None = None,
        note: str = "",
        based_on: int | None = None,
    ) -> ExperimentConfig:
        """A new revision with some weights, the ramp or the kill switch changed.

        Variants not named in `weights` keep theirs; pins and everything else carry
        over. Changing nothing creates nothing and returns the latest revision.
        `based_on`: the revision the change was made on (what its maker saw); when the
        experiment has moved past it, the change is refused with a StaleChangeError
        naming who made the newer revision and when. None: on the latest, as it is.
        """
        latest = self.get(name)
        _check_basis(latest, based_on)
        data = latest.to_dict()
        for variant_name, weight in (weights or {}).items():
            latest.variant(variant_name)  # an unknown name is an error naming the known ones
            for variant in data["variants"]:
                if variant["name"] == variant_name:
                    variant["weight"] = weight
        if ramp is not None:
            data["ramp"] = ramp
        if killed is not None:
            data["killed"] = killed
        config, _ = self._save(
            parse_experiment_file(data, source=f"experiment {name}"), note, latest.revision
        )
        return config

    def export(self, name: str, revision: int | None = None) -> str:
        """The full config of a revision as YAML: what `promptlab assign FILE` reads."""
        return export_yaml(self.get(name, revision))

    def import_exposures(self, path: str | Path, source: str | None = None) -> int:
        """Import an exposure log (JSON Lines); return how many exposures were new.

        Every line is checked against the revision it names (its experiment, variant,
        bucket and pinned version); a bad line refuses the whole file, naming its line,
        and nothing is stored. Exposures already stored are not stored twice. `source`:
        what refusals and the trail call the file (an upload's name where it was sent).
        """
        path = Path(path)
        source = source or str(path)
        configs: dict[tuple[str, int], ExperimentConfig] = {}

        def checked_batches() -> Iterator[builtins.list[Exposure]]:
            batch: builtins.list[Exposure] = []
            for exposure in read_exposures(path, shown=source):
                where = f"exposures {source}, line {exposure.line}"
                key = (exposure.experiment, exposure.revision)
                try:
                    if key not in configs:
                        configs[key] = self.get(*key)
                    check_exposure(exposure, configs[key])
                except ExperimentError as exc:
                    raise ExperimentError(f"{where}: {exc}") from exc
                batch.append(exposure)
                if len(batch) >= EXPOSURE_BATCH:
                    yield batch
                    batch = []
            yield batch

        added = self._rows.add_exposures(
            checked_batches(), source=source, imported_at=self._context.store.clock.now()
        )
        self._context.audit_change(
            "exposures.imported",
            self._context.author(),
            {"source": source, "new": added},
        )
        return added

    def exposure_counts(self, name: str) -> dict[tuple[int, str], int]:
        """Distinct units exposed per (revision, variant) of `name`."""
        return self._rows.exposure_counts(name)

    def _check_models(self, experiment: ExperimentFile) -> None:
        """Every variant's model is on a configured endpoint (built in or in the providers
        file). An experiment outlives any run, so a run spec's own endpoints do not count."""
        endpoints = load_endpoints(self._context.settings.providers_file)
        for index, variant in enumerate(experiment.variants):
            if variant.model is None:
                continue
            try:
                check_model_ref(variant.model, endpoints)
            except ConfigError as exc:
                where = f"{experiment.source}: variants[{index}].model"
                raise ExperimentError(f"{where}: {exc}") from exc

    def _pin_variants(self, experiment: ExperimentFile) -> ExperimentFile:
        pinned = []
        for index, variant in enumerate(experiment.variants):
            ref = variant.prompt
            if variant.prompt_version_id is not None:
                ref = f"{variant.prompt.split('@', 1)[0]}@{variant.prompt_version_id}"
            try:
                version = self._context.registry.resolve(ref)
            except RegistryError as exc:
                where = f"{experiment.source}: variants[{index}].prompt"
                raise ExperimentError(f"{where}: {exc}") from exc
            pinned.append(replace(variant, prompt_version_id=version.id))
        return replace(experiment, variants=tuple(pinned))

    def _save(
        self, experiment: ExperimentFile, note: str, based_on: int | None
    ) -> tuple[ExperimentConfig, bool]:
        latest = self._rows.latest(experiment.name)
        previous = _stored_config(latest) if latest is not None else None
        _check_change(experiment, previous, based_on)
        if previous is not None and experiment.content() == previous.content():
            return previous, False
        config = _next_revision(
            experiment, previous, note, self._context.author(), self._context.store.clock.now()
        )
        self._rows.add_revision(
            config.name,
            config.revision,
            config.salt,
            config_json(config),
            author=config.author,
            created_at=config.created_at,
            note=note,
        )
        self._context.audit_change(
            "experiment.created" if previous is None else "experiment.changed",
            config.author,
            {
                "experiment": config.name,
                "revision": config.revision,
                "weights": {v.name: v.weight for v in config.variants},
                "ramp": config.ramp,
                "killed": config.killed,
                "note": note,
            },
        )
        for listener in list(self._listeners):
            listener(config)
        return config, True

    def on_change(self, listener: Callable[[ExperimentConfig], None]) -> None:
        """Call `listener` with each new revision saved through this workbench (a
        server's assignment cache drops the old one at once: a kill switch is
        immediate in the process that flips it)."""
        self._listeners.append(listener)

    def list(self) -> builtins.list[ExperimentConfig]:
        """The latest revision of every experiment, by name."""
        return [_stored_config(row) for row in self._rows.latest_revisions()]


def _check_basis(latest: ExperimentConfig, based_on: int | None) -> None:
    """Refuse a change made on a revision older than the latest (someone changed it since)."""
    if based_on is None or based_on == latest.revision:
        return
    raise StaleChangeError(
        f"experiment {latest.name!r} is at revision {latest.revision}, made by "
        f"{latest.author} at {moment(latest.created_at)}, but the change was made on "
        f"revision {based_on}; look at revision {latest.revision} and change it again",
        changed_by=latest.author,
        changed_at=latest.created_at,
    )


def _check_change(
    experiment: ExperimentFile, previous: ExperimentConfig | None, based_on: int | None
) -> None:
    """Refuse a change on a stale or missing revision, or one that moves the salt."""
    if previous is None:
        if based_on:
            raise ExperimentError(
                f"{experiment.source}: no experiment named {experiment.name!r} has revision "
                f"{based_on} to base a change on"
            )
        return
    _check_basis(previous, based_on)
    if experiment.salt != previous.salt:
        raise ExperimentError(
            f"{experiment.source}: salt: {experiment.name} was created with salt "
            f"{previous.salt!r}; a salt never changes (it would move every unit)"
        )


def _next_revision(
    experiment: ExperimentFile,
    previous: ExperimentConfig | None,
    note: str,
    author: str,
    created_at: datetime,
) -> ExperimentConfig:
    """The revision after `previous` (1 when there is none): the file's content, units
    moved as little as the new weights allow."""
    return ExperimentConfig(
        name=experiment.name,
        description=experiment.description,
        salt=experiment.salt,
        revision=previous.revision + 1 if previous else 1,
        mode=experiment.mode,
        unit_column=experiment.unit_column,
        ramp=experiment.ramp,
        killed=experiment.killed,
        variants=experiment.variants,
        allocation=allocate(experiment.weights, previous.allocation if previous else None),
        author=author,
        created_at=created_at,
        note=note,
        metrics=experiment.metrics,
        planned_units=experiment.planned_units,
        rollout=experiment.rollout,
    )


def _stored_config(row: StoredRevision) -> ExperimentConfig:
    return config_from_mapping(row.config, source=f"experiment {row.name} revision {row.revision}")
