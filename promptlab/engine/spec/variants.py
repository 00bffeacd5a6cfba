"""A run spec's variants: VariantSpec, each variant checked as written (a registry
prompt, inline messages, or requests sent as written), an experiment's variants as a
spec's."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from promptlab.errors import ConfigError, SpecError, TemplateError
from promptlab.experiments.sampling import parse_sampling
from promptlab.prompts.templates import normalize_params
from promptlab.providers.config import parse_model_ref

VARIANT_FIELDS = frozenset(
    {
        "name",
        "prompt",
        "messages",
        "model",
        "params",
        "params_from",
        "output_schema",
        "rules",
        "requests",
        "id_field",
        "sampling",
    }
)
#: `requests: as_written`: each dataset line is a request (see promptlab/data/batchfile.py).
AS_WRITTEN = "as_written"
#: Where a variant's record keeps `params_from` (param -> dataset column) among its params.
PARAM_COLUMNS_KEY = "columns"
#: Request params a variant may set on top of its template's.
VARIANT_PARAMS = frozenset({"temperature", "top_p", "max_tokens"})


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


def parse_variant(data: Any, index: int) -> VariantSpec:
    """One entry of `variants:`, checked field by field."""
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
