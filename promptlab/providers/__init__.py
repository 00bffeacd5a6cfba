"""Provider adapters: OpenAI (and compatible servers), Anthropic, and the simulator."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from promptlab.errors import ConfigError
from promptlab.providers.base import (
    CompletionRequest,
    CompletionResponse,
    FinishReason,
    Provider,
)
from promptlab.providers.config import (
    EndpointConfig,
    ModelPrice,
    cost_usd,
    load_endpoints,
    parse_model_ref,
    sim_pace,
)


@dataclass(frozen=True)
class ProviderKind:
    """An endpoint kind a providers file names by `kind:`: built in, or a plugin's
    (promptlab/plugins/hookspecs.py `register_providers`)."""

    name: str
    #: `build(endpoint, api_key, environ)`: the adapter. The key is read by promptlab from
    #: the env var the providers file names (None when it names none), never from a spec;
    #: `environ` is the process's settings (the simulator's pace), not a place for keys.
    build: Callable[[EndpointConfig, str | None, Mapping[str, str]], Provider]
    #: Who registered it (set by the plugin manager).
    plugin: str = "promptlab"


def build_provider(
    endpoint: EndpointConfig, *, environ: Mapping[str, str] | None = None
) -> Provider:
    """The adapter for an endpoint, its key read now from the env var the config names.

    `openai` and `anthropic` endpoints get the lean HTTP adapters (providers/http.py)
    unless their `transport` is "sdk" (the official SDK adapters); a plugin's kind gets
    its plugin's adapter.
    """
    environ = os.environ if environ is None else environ
    from promptlab.plugins.manager import plugins

    kind = plugins().provider_kinds(endpoint.kind).get(endpoint.kind)
    if kind is None:
        raise ConfigError(f"endpoint {endpoint.name!r}: unknown kind {endpoint.kind!r}")
    return kind.build(endpoint, read_key(endpoint, environ), environ)


def built_in_providers() -> list[ProviderKind]:
    """The kinds promptlab brings (registered by promptlab/plugins/builtins.py)."""
    return [
        ProviderKind("openai", _openai),
        ProviderKind("anthropic", _anthropic),
        ProviderKind("sim", _sim),
    ]


# Adapters import lazily: the sim needs no HTTP client, and the SDKs are slow to import.


def _sim(endpoint: EndpointConfig, _key: str | None, environ: Mapping[str, str]) -> Provider:
    from promptlab.providers.sim import SimProvider

    return SimProvider(endpoint, pace=sim_pace(environ))


def _openai(endpoint: EndpointConfig, api_key: str | None, _env: Mapping[str, str]) -> Provider:
    if endpoint.transport == "http":
        from promptlab.providers.http import OpenAIHttpProvider

        return OpenAIHttpProvider(endpoint, api_key)
    from promptlab.providers.openai import OpenAIProvider

    return OpenAIProvider(endpoint, api_key)


def _anthropic(endpoint: EndpointConfig, api_key: str | None, _env: Mapping[str, str]) -> Provider:
    if endpoint.transport == "http":
        from promptlab.providers.http import AnthropicHttpProvider

        return AnthropicHttpProvider(endpoint, api_key)
    from promptlab.providers.anthropic import AnthropicProvider

    return AnthropicProvider(endpoint, api_key or "")


def read_key(endpoint: EndpointConfig, environ: Mapping[str, str]) -> str | None:
    """The endpoint's key from the env var its config names; None when it names none,
    ConfigError when that variable is not set."""
    if endpoint.api_key_env is None:
        return None
    key = environ.get(endpoint.api_key_env)
    if not key:
        raise ConfigError(
            f"endpoint {endpoint.name!r} needs an API key: set the environment variable "
            f"{endpoint.api_key_env} (or use sim:careful, which needs none)"
        )
    return key


__all__ = [
    "CompletionRequest",
    "CompletionResponse",
    "EndpointConfig",
    "FinishReason",
    "ModelPrice",
    "Provider",
    "build_provider",
    "cost_usd",
    "load_endpoints",
    "parse_model_ref",
]
