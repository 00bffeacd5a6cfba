"""The endpoint kinds an adapter exists for: promptlab's (openai, anthropic, sim) and those
installed plugins register (promptlab/plugins/, `register_providers`).

Checked as `kind in endpoint_kinds(load=False) or kind in endpoint_kinds()`: a built-in
kind loads no plugin, and the value checked goes into no function (a spec's walk stays
where it is)."""

from __future__ import annotations


def endpoint_kinds(load: bool = True) -> tuple[str, ...]:
    """Every endpoint kind an adapter exists for, the installed plugins' loaded first;
    `load=False`: those known so far (promptlab's own, until something loads them)."""
    from promptlab.plugins.manager import plugins  # the registry imports the providers

    return tuple(plugins().provider_kinds(load=load))
