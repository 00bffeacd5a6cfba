"""A run's end as the engine tells it: `RunEnd`, the one argument of the run-ended hook
that whoever composes the engine gives it (the Workbench gives evaluation's)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from promptlab.engine.spec.runspec import RunSpec, parse_spec
from promptlab.providers.config import EndpointConfig
from promptlab.store.connection import Store

#: What `RunEnd.submit` takes: a parsed spec, or a spec mapping the engine parses.
SpecSubmit = Callable[[RunSpec | Mapping[str, Any]], str]


@dataclass(frozen=True)
class RunEnd:
    """A run reached a final state (`status`), not yet recorded: the hook's work comes
    first, so a process killed during it leaves the run to resume and end again."""

    store: Store
    run_id: str
    spec: RunSpec
    status: str
    reason: str | None
    #: Starts a run of its own (a judge's, a validation's); its id.
    submit: SpecSubmit
    #: The engine's endpoints (the providers file's and the built-in ones): where
    #: after-run work that calls a model (a drift check's embeddings) finds it.
    endpoints: Mapping[str, EndpointConfig] = field(default_factory=dict)


#: Called by the engine at each end of a run; never expected to raise.
RunEndedHook = Callable[[RunEnd], None]


def spec_submit(submit: Callable[[RunSpec], str]) -> SpecSubmit:
    """`submit` taking a spec mapping too: one the hook built from the ended run's
    checked spec, so parsed as trusted (its endpoints hold as the run's did)."""

    def submit_spec(spec: RunSpec | Mapping[str, Any]) -> str:
        return submit(spec if isinstance(spec, RunSpec) else parse_spec(spec, trusted=True))

    return submit_spec
