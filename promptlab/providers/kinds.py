"""The endpoint kinds an adapter exists for: promptlab's (openai, anthropic, sim) and those
installed plugins register (promptlab/plugins/, `register_providers`)."""

from __future__ import annotations

from typing import Any, TypeGuard


def is_endpoint_kind(kind: Any) -> TypeGuard[str]:
    """Whether an adapter exists for `kind` (the plugins load when it is none of
    promptlab's)."""
    from promptlab.plugins.manager import plugins  # the registry imports the providers

    return isinstance(kind, str) and kind in plugins().provider_kinds(kind)


def endpoint_kinds() -> list[str]:
    """Every endpoint kind an adapter exists for, the plugins' included."""
    from promptlab.plugins.manager import plugins

    return list(plugins().provider_kinds())
