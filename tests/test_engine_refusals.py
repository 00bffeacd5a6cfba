"""A run whose first requests are all refused with the same 400 stops, with that message,
instead of sending every item into it (issue 23, item 4)."""

from __future__ import annotations

from pathlib import Path

from promptlab.engine import Engine, parse_spec
from promptlab.engine.send.refusals import SYSTEMATIC_REFUSALS, RefusalWatch
from promptlab.engine.testing import ScriptedProvider
from promptlab.errors import ErrorKind, ProviderError
from promptlab.providers.config import EndpointConfig
from promptlab.store import Store

ROWS = 60
REFUSAL = "temperature and top_p cannot both be specified for this model"


def run_with(store: Store, tmp_path: Path, provider: ScriptedProvider) -> tuple[str, str | None]:
    dataset = tmp_path / "d.csv"
    dataset.write_text("text\n" + "".join(f"row {i}\n" for i in range(ROWS)))
    spec = parse_spec(
        {
            "dataset": str(dataset),
            "variants": [
                {
                    "messages": [{"role": "user", "content": "{{ text }}"}],
                    "model": "strict:m",
                    "params": {"temperature": 0.2, "top_p": 0.9},
                }
            ],
            "limits": {"strict": {"concurrency": 4}},
        }
    )
    endpoint = EndpointConfig(name="strict", kind="fake")
    with Engine(store, endpoints={"strict": endpoint}, provider_factory=lambda _c: provider) as e:
        run_id = e.submit(spec)
        done = e.wait(run_id, timeout=60)
    return str(done.status), done.reason


def test_the_same_refusal_from_the_first_requests_stops_the_run(
    store: Store, tmp_path: Path
) -> None:
    provider = ScriptedProvider(fault=lambda _r, _n: ProviderError(ErrorKind.BAD_REQUEST, REFUSAL))
    status, reason = run_with(store, tmp_path, provider)
    assert status == "failed"
    assert reason == (
        f"stopped: bad_request: the first {SYSTEMATIC_REFUSALS} requests to strict were all "
        "refused "
        f"with the same message, so every item would be: {REFUSAL}"
    )
    # Those, and what was already in flight (concurrency 4): not all 60.
    assert sum(provider.calls.values()) < SYSTEMATIC_REFUSALS + 4 < ROWS


def test_refusals_that_differ_per_item_are_the_items_own(store: Store, tmp_path: Path) -> None:
    def per_row(request: object, _n: int) -> ProviderError:
        return ProviderError(ErrorKind.BAD_REQUEST, f"row too long: {request.request_id}")  # type: ignore[attr-defined]

    provider = ScriptedProvider(fault=per_row)
    status, _ = run_with(store, tmp_path, provider)
    assert status == "completed" and sum(provider.calls.values()) == ROWS


def test_a_lane_that_answered_first_is_not_stopped_by_later_refusals() -> None:
    watch = RefusalWatch(limit=3)
    refused = ProviderError(ErrorKind.BAD_REQUEST, REFUSAL)
    assert watch.observe("a", None) is None
    assert [watch.observe("a", refused) for _ in range(5)] == [None] * 5
    # Throttles and timeouts say nothing of the request: they neither count nor clear.
    busy = ProviderError(ErrorKind.RATE_LIMIT, "slow down", status=429)
    late = ProviderError(ErrorKind.TIMEOUT, "no answer")
    found = [watch.observe("b", e) for e in (refused, busy, refused, late, refused)]
    assert found == [None, None, None, None, REFUSAL]
