"""A spec's endpoint is its whole configuration: a second spec declaring an endpoint
under the same name with other limits gets its own provider and budget."""

from __future__ import annotations

import time
from pathlib import Path

from promptlab.engine import Engine, RunSpec, parse_spec
from promptlab.engine.testing import ScriptedProvider
from promptlab.store import Store


def spec_with(dataset: Path, rpm: int) -> RunSpec:
    return parse_spec(
        {
            "dataset": str(dataset),
            "endpoints": {"mine": {"kind": "sim", "rpm": rpm}},
            "variants": [
                {"messages": [{"role": "user", "content": "{{ text }}"}], "model": "mine:fast"}
            ],
        }
    )


def limits_while_held(engine: Engine, provider: ScriptedProvider, spec: RunSpec) -> list[float]:
    """The shared limiters' rpm of a run, read while its requests are held in flight."""
    provider.hold_requests()
    run_id = engine.submit(spec)
    try:
        deadline = time.monotonic() + 30
        while provider.in_flight == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        return [state.rpm for state in engine.status(run_id).limiters if state.rpm]
    finally:
        provider.release_requests()
        assert engine.wait(run_id, timeout=60).status == "completed"


def test_the_same_endpoint_name_with_other_limits_gets_its_own_budget(
    store: Store, tmp_path: Path
) -> None:
    dataset = tmp_path / "d.csv"
    dataset.write_text("text\n" + "".join(f"row {i}\n" for i in range(1)))
    provider = ScriptedProvider()
    with Engine(store, endpoints={}, provider_factory=lambda _cfg: provider) as engine:
        assert limits_while_held(engine, provider, spec_with(dataset, rpm=60)) == [60]
        assert limits_while_held(engine, provider, spec_with(dataset, rpm=6000)) == [6000]
        assert limits_while_held(engine, provider, spec_with(dataset, rpm=60)) == [60]
