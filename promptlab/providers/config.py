"""Provider endpoints: built-in defaults, the providers file, model refs and prices.

The providers file (YAML, see data/providers.example.yaml) adds endpoints or overrides
fields of the built-in ones. It names the *environment variable* holding each key;
keys themselves are never written to the file, stored, or logged.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from promptlab.errors import ConfigError
from promptlab.providers.batchconfig import BatchSettings, batch_settings
from promptlab.providers.kinds import endpoint_kinds
from promptlab.providers.modelrules import ANY, RULES
from promptlab.yamlio import read_yaml

#: How openai and anthropic endpoints are reached: the lean aiohttp path (providers/
#: http.py, the default) or the vendor SDK adapters. Set only in the providers file.
TRANSPORTS = ("http", "sdk")
#: Where an endpoint's calls are made: in this process, on Celery workers
#: (promptlab/distributed/), which share one rate budget in Redis, or through the
#: provider's Batch API at the batch price (providers/batches/).
EXECUTORS = ("local", "celery", "provider-batch")

#: Ollama's OpenAI-compatible endpoint, the most common local server.
DEFAULT_LOCAL_BASE_URL = "http://localhost:11434/v1"

#: Model key that prices every model of an endpoint not listed by name.
ANY_MODEL = "*"


@dataclass(frozen=True)
class ModelPrice:
    """US dollars per million input and output tokens."""

    input_per_mtok: float
    output_per_mtok: float


@dataclass(frozen=True)
class EndpointConfig:
    """One provider endpoint: where it is, which env var holds its key, limits, prices."""

    name: str
    kind: str
    base_url: str | None = None
    api_key_env: str | None = None
    rpm: int | None = None
    tpm: int | None = None
    concurrency: int | None = None
    prices: dict[str, ModelPrice] = field(default_factory=dict)
    context_windows: dict[str, int] = field(default_factory=dict)
    #: Per model: which sampling parameters it takes (providers/modelrules.py RULES).
    sampling_rules: dict[str, str] = field(default_factory=dict)
    #: Multiplies the simulated latency of a `sim` endpoint (0 = answer at once).
    latency_scale: float = 1.0
    #: One of TRANSPORTS; ignored by `sim` endpoints.
    transport: str = "http"
    #: One of EXECUTORS: `celery` sends this endpoint's calls through the workers.
    executor: str = "local"
    #: The Celery queue its chunks go to (None: `promptlab`): workers started with
    #: `--queues` take only theirs, so a slow endpoint holds up no other.
    queue: str | None = None
    #: How its provider batches are sized, priced and polled (providers/batchconfig.py).
    batch: BatchSettings = field(default_factory=BatchSettings)

    def __hash__(self) -> int:
        # The dict fields are unhashable; an endpoint is identified by where it points and
        # whose key it uses, which is also what a shared rate-limit budget is keyed by.
        return hash((self.name, self.kind, self.base_url, self.api_key_env))


# Published list prices (USD per million tokens) at the time of writing; edit them in
# the providers file when they change. Sim prices are illustrative, so demos show cost.
_OPENAI_PRICES = {
    "gpt-4o": ModelPrice(2.50, 10.00),
    "gpt-4o-mini": ModelPrice(0.15, 0.60),
    "gpt-4.1": ModelPrice(2.00, 8.00),
    "gpt-4.1-mini": ModelPrice(0.40, 1.60),
    "gpt-4.1-nano": ModelPrice(0.10, 0.40),
    "o3-mini": ModelPrice(1.10, 4.40),
}
_OPENAI_WINDOWS = {
    "gpt-4o": 128_000,
    "gpt-4o-mini": 128_000,
    "gpt-4.1": 1_047_576,
    "gpt-4.1-mini": 1_047_576,
    "gpt-4.1-nano": 1_047_576,
    "o3-mini": 200_000,
    "gpt-3.5-turbo": 16_385,
}
_ANTHROPIC_PRICES = {
    "claude-sonnet-4-5": ModelPrice(3.00, 15.00),
    "claude-opus-4-1": ModelPrice(15.00, 75.00),
    "claude-haiku-4-5": ModelPrice(1.00, 5.00),
    "claude-3-5-haiku-latest": ModelPrice(0.80, 4.00),
}
_ANTHROPIC_WINDOWS = {
    "claude-sonnet-4-5": 200_000,
    "claude-opus-4-1": 200_000,
    "claude-haiku-4-5": 200_000,
    "claude-3-5-haiku-latest": 200_000,
}
# Which sampling parameters a model takes (promptlab/providers/modelrules.py); a listed
# name covers its dated versions. Models not listed take both.
_OPENAI_SAMPLING = {
    name: "none" for name in ("o1", "o3", "o3-mini", "o4-mini", "gpt-5", "gpt-5-mini", "gpt-5-nano")
}
_ANTHROPIC_SAMPLING = {
    "claude-sonnet-4-5": "one",
    "claude-haiku-4-5": "one",
    "claude-opus-4-1": "one",
    "claude-opus-4-7": "none",
    "claude-opus-4-8": "none",
    "claude-sonnet-5": "none",
    "claude-fable": "none",
}
_KIND_SAMPLING = {"openai": _OPENAI_SAMPLING, "anthropic": _ANTHROPIC_SAMPLING}
_SIM_PRICES = {
    "careful": ModelPrice(3.00, 12.00),
    "balanced": ModelPrice(0.50, 1.50),
    "fast": ModelPrice(0.10, 0.40),
    "sloppy": ModelPrice(0.05, 0.20),
    "pocket": ModelPrice(0.05, 0.20),
}
_SIM_WINDOWS = {
    "careful": 128_000,
    "balanced": 32_000,
    "fast": 16_000,
    "sloppy": 8_000,
    "pocket": 512,
}
#: Ollama's default context length; raise it here when the server runs with more.
_LOCAL_DEFAULT_WINDOW = 8_192


#: How fast the simulated model's clock runs against the wall's: at 1 it waits out the
#: latency it reports and allows 6,000 requests a minute (live progress looks real); at
#: 0.1 it answers ten times sooner and allows ten times as many. Its answers and the
#: latencies recorded are the same at any pace; demos and the test suite go faster.
PACE_ENV = "PROMPTLAB_SIM_PACE"


def sim_pace(environ: Mapping[str, str]) -> float:
    """PROMPTLAB_SIM_PACE as a number over 0 and at most 1 (default 1); else refused."""
    text = environ.get(PACE_ENV, "").strip()
    if not text:
        return 1.0
    try:
        pace = float(text)
    except ValueError:
        pace = -1.0
    if not 0.0 < pace <= 1.0:
        raise ConfigError(f"{PACE_ENV}: expected a number over 0 and at most 1, got {text!r}")
    return pace


def builtin_endpoints(environ: Mapping[str, str] | None = None) -> dict[str, EndpointConfig]:
    """The endpoints that exist with no providers file."""
    env = os.environ if environ is None else environ
    return {
        "sim": EndpointConfig(
            name="sim",
            kind="sim",
            rpm=round(6_000 / sim_pace(env)),
            tpm=10_000_000,
            # 6,000 a minute is 100 a second: at the careful model's 1.3 s that takes
            # about 130 in flight (the demo's 800 requests in about 9 s).
            concurrency=128,
            prices=dict(_SIM_PRICES),
            context_windows=dict(_SIM_WINDOWS),
        ),
        "openai": EndpointConfig(
            name="openai",
            kind="openai",
            base_url=env.get("OPENAI_BASE_URL") or None,
            api_key_env="OPENAI_API_KEY",
            rpm=500,
            tpm=200_000,
            concurrency=16,
            prices=dict(_OPENAI_PRICES),
            context_windows=dict(_OPENAI_WINDOWS),
            sampling_rules=dict(_OPENAI_SAMPLING),
        ),
        "anthropic": EndpointConfig(
            name="anthropic",
            kind="anthropic",
            base_url=env.get("ANTHROPIC_BASE_URL") or None,
            api_key_env="ANTHROPIC_API_KEY",
            rpm=50,
            tpm=30_000,
            concurrency=8,
            prices=dict(_ANTHROPIC_PRICES),
            context_windows=dict(_ANTHROPIC_WINDOWS),
            sampling_rules=dict(_ANTHROPIC_SAMPLING),
        ),
        "local": EndpointConfig(
            name="local",
            kind="openai",
            base_url=DEFAULT_LOCAL_BASE_URL,
            api_key_env=None,
            concurrency=4,
            prices={ANY_MODEL: ModelPrice(0.0, 0.0)},
            context_windows={ANY_MODEL: _LOCAL_DEFAULT_WINDOW},
        ),
    }


_ENDPOINT_FIELDS = {
    "kind",
    "base_url",
    "api_key_env",
    "rpm",
    "tpm",
    "concurrency",
    "models",
    "latency_scale",
    "transport",
    "executor",
    "queue",
    "batch",
}
_MODEL_FIELDS = {"input_per_mtok", "output_per_mtok", "context_window", "sampling"}


def load_endpoints(
    path: Path | None, environ: Mapping[str, str] | None = None
) -> dict[str, EndpointConfig]:
    """Built-in endpoints, with those of the providers file at `path` added or overriding."""
    endpoints = builtin_endpoints(environ)
    if path is None:
        return endpoints
    data = read_yaml(path, error=ConfigError)
    if data is None:
        return endpoints
    if not isinstance(data, dict) or not isinstance(data.get("endpoints", {}), dict):
        raise ConfigError(f"providers file {path}: expected a mapping with an 'endpoints' key")
    for name, spec in (data.get("endpoints") or {}).items():
        where = f"providers file {path}, endpoint {name!r}"
        endpoints[str(name)] = _merge_endpoint(endpoints.get(str(name)), str(name), spec, where)
    return endpoints


#: What a command line may set for an endpoint (`promptlab batch --base-url ...`).
LOCAL_FIELDS = frozenset(
    {"kind", "base_url", "api_key_env", "rpm", "tpm", "concurrency", "executor", "batch"}
)


def with_local_endpoints(
    endpoints: Mapping[str, EndpointConfig], local: Mapping[str, Mapping[str, Any]]
) -> dict[str, EndpointConfig]:
    """`endpoints` with those a command line gave added or overriding fields, checked as
    the providers file's are (`local` comes only from a trusted caller)."""
    out = dict(endpoints)
    for name, fields in local.items():
        unknown = sorted(set(fields) - LOCAL_FIELDS)
        if unknown:
            raise ConfigError(f"endpoint {name!r}: unknown field(s) {', '.join(unknown)}")
        out[name] = _merge_endpoint(out.get(name), name, dict(fields), f"endpoint {name!r}")
    return out


def _merge_endpoint(
    base: EndpointConfig | None, name: str, spec: Any, where: str
) -> EndpointConfig:
    if spec is None:
        spec = {}
    if not isinstance(spec, dict):
        raise ConfigError(f"{where}: expected a mapping of fields")
    if "api_key" in spec:
        raise ConfigError(f"{where}: keep keys out of files; name the env var in api_key_env")
    unknown = set(spec) - _ENDPOINT_FIELDS
    if unknown:
        raise ConfigError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
    kind = spec.get("kind", base.kind if base else None)
    if kind not in endpoint_kinds(load=False) and kind not in endpoint_kinds():
        kinds = ", ".join(endpoint_kinds())
        raise ConfigError(f"{where}: kind must be one of {kinds}, got {kind!r}")
    current = base if base is not None and base.kind == kind else EndpointConfig(name, kind)
    changes = _model_changes(current, spec.get("models") or {}, where)
    changes.update(_field_changes(spec, where))
    return replace(current, **changes)


def _model_changes(current: EndpointConfig, models: Any, where: str) -> dict[str, Any]:
    """The endpoint's prices, context windows and sampling rules with `models` merged in."""
    prices = dict(current.prices)
    windows = dict(current.context_windows)
    rules = dict(current.sampling_rules)
    if not isinstance(models, dict):
        raise ConfigError(f"{where}: 'models' must map model names to prices/windows")
    for model, mspec in models.items():
        model_where = f"{where}, model {model!r}"
        _merge_model(str(model), mspec or {}, prices, windows, model_where)
        if isinstance(mspec, dict) and "sampling" in mspec:
            if mspec["sampling"] not in RULES:
                raise ConfigError(
                    f"{model_where}: sampling must be one of {', '.join(RULES)}, "
                    f"got {mspec['sampling']!r}"
                )
            rules[str(model)] = mspec["sampling"]
    return {"prices": prices, "context_windows": windows, "sampling_rules": rules}


def _field_changes(spec: dict[str, Any], where: str) -> dict[str, Any]:
    """The endpoint's plain fields `spec` sets, each checked."""
    changes: dict[str, Any] = {}
    for key in ("base_url", "api_key_env"):
        if key in spec:
            changes[key] = _optional_str(spec[key], f"{where}: {key}")
    for key in ("rpm", "tpm", "concurrency"):
        if key in spec:
            changes[key] = _optional_positive_int(spec[key], f"{where}: {key}")
    if "transport" in spec:
        if spec["transport"] not in TRANSPORTS:
            raise ConfigError(
                f"{where}: transport must be one of {', '.join(TRANSPORTS)}, "
                f"got {spec['transport']!r}"
            )
        changes["transport"] = spec["transport"]
    if "executor" in spec:
        if spec["executor"] not in EXECUTORS:
            raise ConfigError(
                f"{where}: executor must be one of {', '.join(EXECUTORS)}, got {spec['executor']!r}"
            )
        changes["executor"] = spec["executor"]
    if "batch" in spec:
        changes["batch"] = batch_settings(spec["batch"], where)
    if "queue" in spec:
        changes["queue"] = _optional_str(spec["queue"], f"{where}: queue")
    if "latency_scale" in spec:
        changes["latency_scale"] = _non_negative(spec["latency_scale"], f"{where}: latency_scale")
    return changes


def _merge_model(
    model: str, spec: Any, prices: dict[str, ModelPrice], windows: dict[str, int], where: str
) -> None:
    if not isinstance(spec, dict):
        raise ConfigError(f"{where}: expected a mapping")
    unknown = set(spec) - _MODEL_FIELDS
    if unknown:
        raise ConfigError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
    if "input_per_mtok" in spec or "output_per_mtok" in spec:
        old = prices.get(model, ModelPrice(0.0, 0.0))
        prices[model] = ModelPrice(
            _non_negative(spec.get("input_per_mtok", old.input_per_mtok), f"{where}: price"),
            _non_negative(spec.get("output_per_mtok", old.output_per_mtok), f"{where}: price"),
        )
    if "context_window" in spec:
        window = _optional_positive_int(spec["context_window"], f"{where}: context_window")
        if window is None:
            windows.pop(model, None)
        else:
            windows[model] = window


def _optional_str(value: Any, where: str) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise ConfigError(f"{where} must be a string")
    return value


def _optional_positive_int(value: Any, where: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(f"{where} must be a positive integer, got {value!r}")
    return value


def _non_negative(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ConfigError(f"{where} must be a non-negative number, got {value!r}")
    return float(value)


def parse_model_ref(ref: str) -> tuple[str, str]:
    """Split `endpoint:model` (e.g. `openai:gpt-4o-mini`) into its two parts."""
    endpoint, sep, model = ref.partition(":")
    if not sep or not endpoint.strip() or not model.strip():
        raise ConfigError(
            f"model reference {ref!r} must look like 'endpoint:model', "
            "e.g. 'openai:gpt-4o-mini' or 'sim:careful'"
        )
    return endpoint.strip(), model.strip()


def check_model_ref(ref: str, endpoints: Mapping[str, EndpointConfig]) -> tuple[str, str]:
    """`endpoint:model` split, its endpoint one of `endpoints` (ConfigError names them)."""
    endpoint, model = parse_model_ref(ref)
    if endpoint not in endpoints:
        known = ", ".join(sorted(endpoints))
        raise ConfigError(f"unknown endpoint {endpoint!r} (known: {known})")
    return endpoint, model


def lookup_model(table: Mapping[str, Any], model: str) -> Any | None:
    """A model's entry: exact name, else the longest listed prefix (dated versions), else '*'."""
    if model in table:
        return table[model]
    prefixes = [name for name in table if name != ANY_MODEL and model.startswith(name)]
    if prefixes:
        return table[max(prefixes, key=len)]
    return table.get(ANY_MODEL)


def price_for(endpoint: EndpointConfig, model: str) -> ModelPrice | None:
    """The model's price at this endpoint, or None when the table does not know it."""
    price = lookup_model(endpoint.prices, model)
    return price if isinstance(price, ModelPrice) else None


def sampling_rule(endpoint: EndpointConfig, model: str) -> str:
    """Which sampling parameters the model takes at this endpoint (modelrules.RULES)."""
    rule = lookup_model(endpoint.sampling_rules, model)
    if rule is None:
        # The rule belongs to the model wherever it is served (a proxy, a gateway, a
        # spec's own endpoint of that kind); the table can still say otherwise.
        rule = lookup_model(_KIND_SAMPLING.get(endpoint.kind, {}), model)
    return rule if isinstance(rule, str) else ANY


def cost_usd(endpoint: EndpointConfig, model: str, input_tokens: int, output_tokens: int) -> float:
    """What the tokens cost in US dollars; 0.0 when the model has no price entry."""
    price = price_for(endpoint, model)
    if price is None:
        return 0.0
    per_token = 1_000_000
    live = (input_tokens * price.input_per_mtok + output_tokens * price.output_per_mtok) / per_token
    # Sent through the provider's Batch API: its price (half, unless the file says else).
    return live * endpoint.batch.price if endpoint.executor == "provider-batch" else live
