"""What a call's `model` names, served: one prompt version, its endpoint, model and params.

`experiment:NAME` assigns the unit as `promptlab assign` would (its bucket, the ramp and
the kill switch: promptlab/experiments/assignment.py) and serves the variant's version
with the variant's model and params over the prompt's; `prompt:NAME@label` and
`prompt:NAME@1.2.0` serve one version to everyone. Versions never change once saved, so
they are held by id; experiment configs and labels are read again after a short while
(CONFIG_TTL_S), and at once when this process changes an experiment.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from promptlab.errors import ExperimentError, NotFoundError, PromptlabError
from promptlab.experiments.assignment import assign
from promptlab.experiments.config import ExperimentConfig
from promptlab.gateway.calls import CallRefused
from promptlab.providers.config import parse_model_ref
from promptlab.records.prompts import PromptVersion

#: Seconds a label's version is held before it is read again.
CONFIG_TTL_S = 1.0
#: Versions held by id (each is a template of a few kilobytes).
MAX_HELD_VERSIONS = 1_024
EXPERIMENT, PROMPT = "experiment:", "prompt:"
SAMPLING_PARAMS = ("temperature", "top_p", "max_tokens")


@dataclass(frozen=True)
class Served:
    """The version a call is served, where it is sent, and the assignment behind it."""

    version: PromptVersion
    endpoint: str
    model: str
    params: dict[str, Any]
    experiment: str | None = None
    revision: int | None = None
    variant: str | None = None
    bucket: int | None = None
    in_experiment: bool = False


class Targets:
    """Resolve a call's `model` and unit to what it is served."""

    def __init__(
        self,
        experiment: Callable[[str], ExperimentConfig],
        resolve: Callable[[str], PromptVersion],
    ) -> None:
        """`experiment(name)`: its current config (cached by the caller);
        `resolve(ref)`: the prompt version a reference names (the registry's)."""
        self._experiment = experiment
        self._resolve = resolve
        self._versions: dict[str, PromptVersion] = {}
        self._labels: dict[str, tuple[float, PromptVersion]] = {}
        self._lock = threading.Lock()

    def serve(self, model: str, unit: str | None) -> Served:
        if model.startswith(EXPERIMENT):
            return self._assigned(model.removeprefix(EXPERIMENT), unit)
        if model.startswith(PROMPT):
            version = self._labelled(model.removeprefix(PROMPT))
            endpoint, model_name = _model_of(version, None)
            return Served(version, endpoint, model_name, _params(version, {}))
        raise CallRefused(
            422,
            f"model {model!r}: expected experiment:NAME, prompt:NAME@label or prompt:NAME@1.2.0",
            "model",
        )

    def _assigned(self, name: str, unit: str | None) -> Served:
        if unit is None:
            raise CallRefused(
                400,
                f"experiment:{name} assigns each unit a variant: give the unit (OpenAI's "
                "`user`, Anthropic's metadata.user_id, or the Promptlab-Unit header)",
                "user",
            )
        try:
            config = self._experiment(name)
        except (NotFoundError, ExperimentError) as exc:  # the only thing a read refuses
            raise CallRefused(404, f"model experiment:{name}: {exc}", "model") from None
        assignment = assign(config, unit)
        variant = config.variant(assignment.variant)
        if variant.prompt_version_id is None:
            raise ExperimentError(f"experiment {name!r}: variant {variant.name} is not pinned")
        prompt_name = variant.prompt.partition("@")[0]
        version = self._version(prompt_name, variant.prompt_version_id)
        endpoint, model_name = _model_of(version, variant.model)
        return Served(
            version,
            endpoint,
            model_name,
            _params(version, dict(variant.params)),
            experiment=config.name,
            revision=config.revision,
            variant=variant.name,
            bucket=assignment.bucket,
            in_experiment=assignment.in_experiment,
        )

    def held(self, version_id: str) -> PromptVersion | None:
        """A version this gateway served, by id (the journal's folds check outputs)."""
        return self._versions.get(version_id)

    def _hold(self, version: PromptVersion) -> None:
        with self._lock:
            if len(self._versions) >= MAX_HELD_VERSIONS:
                self._versions.clear()
            self._versions[version.id] = version

    def _version(self, prompt_name: str, version_id: str) -> PromptVersion:
        held = self._versions.get(version_id)
        if held is None:
            held = self._resolve(f"{prompt_name}@{version_id}")
            self._hold(held)
        return held

    def _labelled(self, ref: str) -> PromptVersion:
        if "@" not in ref:
            raise CallRefused(
                422, f"model prompt:{ref}: name the version, as NAME@label or NAME@1.2.0", "model"
            )
        held = self._labels.get(ref)
        if held is not None and time.monotonic() - held[0] <= CONFIG_TTL_S:
            return held[1]
        try:
            version = self._resolve(ref)
        except PromptlabError as exc:
            raise CallRefused(404, f"model prompt:{ref}: {exc}", "model") from None
        with self._lock:
            if len(self._labels) >= MAX_HELD_VERSIONS:
                self._labels.clear()
            self._labels[ref] = (time.monotonic(), version)
        self._hold(version)
        return version


def _model_of(version: PromptVersion, override: str | None) -> tuple[str, str]:
    """(endpoint, model): the variant's `endpoint:model` over the prompt's."""
    ref = override or version.template.params.get("model")
    if not ref:
        raise CallRefused(
            422, f"{version.ref} names no model (params.model: endpoint:model)", "model"
        )
    return parse_model_ref(str(ref))


def _params(version: PromptVersion, overrides: dict[str, Any]) -> dict[str, Any]:
    """The version's sampling params with the variant's on top."""
    params = {
        k: version.template.params[k] for k in SAMPLING_PARAMS if k in version.template.params
    }
    params.update({k: v for k, v in overrides.items() if k in SAMPLING_PARAMS})
    return params
