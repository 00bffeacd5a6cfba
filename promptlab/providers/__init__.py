"""Provider adapters: OpenAI (and compatible servers), Anthropic, and the simulator."""

from __future__ import annotations

import os
from collections.abc import Mapping

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


def build_provider(
    endpoint: EndpointConfig,
    *,
    environ: Mapping[str, str] | None = None,
    latency_scale: float | None = None,
) -> Provider:
    """The adapter for an endpoint, its key read now from the env var the config names.

    `openai` and `anthropic` endpoints get the lean HTTP adapters (providers/http.py)
    unless their `transport` is "sdk" (the official SDK adapters).
    """
    # Adapters import lazily: the sim needs no HTTP client, and the SDKs are slow to import.
    environ = os.environ if environ is None else environ
    if endpoint.kind == "sim":
        from promptlab.providers.sim import SimProvider

        return SimProvider(endpoint, latency_scale=latency_scale, pace=sim_pace(environ))
    api_key = read_key(endpoint, environ)
    if endpoint.kind in ("openai", "anthropic") and endpoint.transport == "http":
        from promptlab.providers.http import AnthropicHttpProvider, OpenAIHttpProvider

        if endpoint.kind == "openai":
            return OpenAIHttpProvider(endpoint, api_key)
        return AnthropicHttpProvider(endpoint, api_key)
    if endpoint.kind == "openai":
        from promptlab.providers.openai import OpenAIProvider

        return OpenAIProvider(endpoint, api_key)
    if endpoint.kind == "anthropic":
        from promptlab.providers.anthropic import AnthropicProvider

        return AnthropicProvider(endpoint, api_key or "")
    raise ConfigError(f"endpoint {endpoint.name!r}: unknown kind {endpoint.kind!r}")


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
