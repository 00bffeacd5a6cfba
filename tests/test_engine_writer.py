"""The batch writer keeps rows through failed commits and sets aside a row that always fails."""

from __future__ import annotations

from pathlib import Path

import pytest

from promptlab.config import Settings
from promptlab.engine import Engine, parse_spec
from promptlab.engine.testing import ScriptedProvider
from promptlab.providers.config import EndpointConfig
from promptlab.records import ItemErrorKind, WriteBatch
from promptlab.store import ItemStore, Store
from promptlab.workbench import Workbench


class RefusingItemStore(ItemStore):
    """A real ItemStore that refuses, every time, any batch holding a poisoned answer."""

    poison = "row 3"

    def write_batch(self, batch: WriteBatch) -> None:
        if any(self.poison in (f.output_text or "") for f in batch.finals):
            raise ValueError("the store cannot take this row")
        super().write_batch(batch)


def test_a_row_the_store_always_refuses_does_not_stall_the_run(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dataset = tmp_path / "d.csv"
    dataset.write_text("text\n" + "".join(f"row {i}\n" for i in range(10)))
    provider = ScriptedProvider()
    engine = Engine(
        store,
        endpoints={"fake": EndpointConfig(name="fake", kind="openai")},
        provider_factory=lambda _cfg: provider,
        items=RefusingItemStore(store),
    )
    monkeypatch.setattr("promptlab.engine.record.writer.RETRY_FLUSH_S", 0.01)
    try:
        spec = parse_spec(
            {
                "name": "poison",
                "dataset": str(dataset),
                "variants": [
                    {
                        "name": "v",
                        "messages": [{"role": "user", "content": "{{ text }}"}],
                        "model": "fake:m",
                    }
                ],
            }
        )
        run_id = engine.submit(spec)
        progress = engine.wait(run_id, timeout=60)
    finally:
        engine.close()
    assert progress.status == "completed"
    with store.read() as cur:
        rows = cur.execute(
            "SELECT row_index, status, error_kind FROM results WHERE run_id = ? ORDER BY row_index",
            [run_id],
        ).fetchall()
    assert len(rows) == 10  # every item still has exactly one final row
    assert rows[3] == (3, "failed", ItemErrorKind.STORE_ERROR)
    assert all(status == "succeeded" for _, status, _ in rows[:3] + rows[4:])
    # Written row by row, each result event still hashed its row as stored: the
    # stand-in row of the refused answer included.
    with Workbench.open(Settings.from_env().with_db(store.path)) as wb:
        keys = [r.key for r in wb.runs.items(run_id, limit=20).rows]
        assert [wb.audit.trace(key).result_verified for key in keys] == [True] * 10
