"""Anomaly alerts in real runs: the simulated sloppy model, with a burst of server errors
mid-run; the engine raises the alert live and the after-run pass finds the same."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from click.testing import CliRunner

from promptlab.cli import main
from promptlab.engine import Engine, parse_spec
from promptlab.errors import ErrorKind, ProviderError
from promptlab.providers import build_provider
from promptlab.providers.base import CompletionRequest, CompletionResponse, Provider
from promptlab.providers.config import EndpointConfig
from promptlab.store import Store
from promptlab.workbench import Workbench
from tests.apptest_helpers import shown
from tests.test_engine_checks import MESSAGES, SCHEMA

ROWS = 400
#: Calls (in order) the server answers with 503: a burst mid-run.
BURST = range(200, 260)


@dataclass
class Spiking:
    """A real provider behind a server that fails a burst of consecutive calls."""

    inner: Provider
    calls: int = 0

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def kind(self) -> str:
        return self.inner.kind

    @property
    def supports_json_schema(self) -> bool:
        return self.inner.supports_json_schema

    async def complete(self, request: CompletionRequest) -> CompletionResponse:
        self.calls += 1
        if self.calls - 1 in BURST:
            raise ProviderError(ErrorKind.SERVER, "overloaded", status=503, provider=self.name)
        return await self.inner.complete(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


def spike_run(tmp_path: Path, store: Store) -> str:
    dataset = tmp_path / "tickets.jsonl"
    dataset.write_text(
        "".join(json.dumps({"ticket": f"ticket number {i}"}) + "\n" for i in range(ROWS))
    )
    spec = parse_spec(
        {
            "name": "spike",
            "dataset": str(dataset),
            "variants": [
                {
                    "name": "json",
                    "messages": MESSAGES,
                    "model": "quick:sloppy",
                    "params": {"max_tokens": 200},
                    "output_schema": SCHEMA,
                }
            ],
            "retry": {"max_attempts": 1},
        }
    )
    # One at a time: calls go out in plan order, so the burst is one stretch of items.
    endpoints = {"quick": EndpointConfig(name="quick", kind="sim", latency_scale=0, concurrency=1)}
    provider = Spiking(build_provider(endpoints["quick"]))
    with Engine(store, endpoints=endpoints, provider_factory=lambda _c: provider) as engine:
        run_id = engine.submit(spec)
        assert engine.wait(run_id, timeout=60).status == "completed"
    return run_id


def test_a_burst_of_failures_raises_alerts_live_and_after(
    tmp_path: Path, store: Store, db_path: Path
) -> None:
    run_id = spike_run(tmp_path, store)
    wb = Workbench(store)
    live = wb.analysis.alerts(run_id)
    kinds = sorted(a.kind for a in live)
    assert kinds == ["error_surge", "failure_rate"], [a.message for a in live]
    rate = next(a for a in live if a.kind == "failure_rate")
    assert rate.variant == "json" and rate.run_id == run_id
    assert BURST.start - 50 <= rate.first_seq and rate.last_seq < BURST.stop
    assert "did not complete" in rate.message and "json: " in rate.message
    surge = next(a for a in live if a.kind == "error_surge")
    assert "error server" in surge.message
    # The after-run pass over the stored results finds the same, and replaces, not adds.
    after = wb.analysis.detect_anomalies(run_id)
    key = lambda a: (a.kind, a.variant, a.first_seq, a.last_seq, a.message)  # noqa: E731
    assert sorted(map(key, after)) == sorted(map(key, live))
    wb.analysis.detect_anomalies(run_id)
    assert sorted(map(key, wb.analysis.alerts(run_id))) == sorted(map(key, live))
    # Shown with the run.
    assert [a.kind for a in wb.runs.view(run_id).alerts] == [
        a.kind for a in wb.analysis.alerts(run_id)
    ]


def test_status_and_the_runs_page_show_the_alerts(tmp_path: Path, db_path: Path) -> None:
    with Store(db_path) as store:
        run_id = spike_run(tmp_path, store)
        messages = [a.message for a in Workbench(store).analysis.alerts(run_id)]
    result = CliRunner().invoke(main, ["status", run_id], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "  alerts (2):" in result.output
    assert all(m in result.output for m in messages)
    again = CliRunner().invoke(main, ["status", run_id, "--detect"], catch_exceptions=False)
    assert again.output.count("alerts (2):") == 1
    assert CliRunner().invoke(main, ["status", "--detect"]).exit_code == 2

    from streamlit.testing.v1 import AppTest

    page = str(Path(__file__).resolve().parent.parent / "pages" / "runs.py")
    at = AppTest.from_file(page, default_timeout=30).run()
    assert not at.exception
    warnings = [shown(w.value) for w in at.warning]
    assert all(any(m in w for w in warnings) for m in messages), warnings
