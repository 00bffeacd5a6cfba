"""What masking secrets costs the writer: redaction alone against the whole commit.

    .venv/bin/python bench/redaction.py --batches 20 --rows 2000

Every batch the engine commits is redacted first (promptlab/audit/redact.py): the values of
key variables and credential-shaped strings are masked in messages and outputs. This
times, on the same batches in one run, the redaction step alone and the full
`ItemStore.write_batch` (redaction + DuckDB commit) into a real temp database, and
prints the ratio. Not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from promptlab.audit.redact import Redactor
from promptlab.engine.plan.planner import AllVariants, plan_items
from promptlab.records import FinalRow, VariantRecord, WriteBatch
from promptlab.store import ItemStore, RunStore, Store
from promptlab.store.items import redacted_batch

#: About the length of a short structured answer, with ordinary words and numbers.
OUTPUT = ("The ticket concerns billing; priority 2, category refund, sentiment neutral. " * 8)[:600]


def batches(run_id: str, count: int, rows: int) -> list[WriteBatch]:
    now = datetime.now(UTC)
    out = []
    for b in range(count):
        finals = [
            FinalRow(
                key=f"{b:04d}{i:028d}",
                run_id=run_id,
                seq=b * rows + i,
                row_index=b * rows + i,
                variant="v",
                repeat=0,
                status="failed" if i % 50 == 0 else "succeeded",
                prompt_version_id="pv",
                endpoint="openai",
                model="gpt-4o-mini",
                params={"max_tokens": 256},
                attempts=1,
                finished_at=now,
                error_message="openai server 500: upstream error" if i % 50 == 0 else None,
                output_text=None if i % 50 == 0 else OUTPUT,
                input_tokens=120,
                output_tokens=150,
                latency_ms=400.0,
                cost_usd=0.0001,
            )
            for i in range(rows)
        ]
        out.append(WriteBatch(dispatched=[f.key for f in finals], finals=finals))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--rows", type=int, default=2000)
    args = parser.parse_args()
    os.environ.setdefault("OPENAI_API_KEY", "sk-bench-0123456789abcdefghij")
    with tempfile.TemporaryDirectory() as tmp, Store(Path(tmp) / "bench.duckdb") as store:
        runs, items = RunStore(store), ItemStore(store)
        run_id = "run_bench"
        runs.create_run(
            run_id, "bench", {}, [VariantRecord(0, "v", "r", "pv", "openai", "m", {}, {})]
        )
        work = batches(run_id, args.batches, args.rows)
        rows = [{"text": "x"}] * (args.batches * args.rows)
        items.plan_items(run_id, plan_items(run_id, rows, ["v"], AllVariants(1), 1))
        # plan_items made its own keys; point the batches at them, in order.
        with store.read() as cur:
            keys = [
                k
                for (k,) in cur.execute(
                    "SELECT idempotency_key FROM items WHERE run_id = ? ORDER BY seq", [run_id]
                ).fetchall()
            ]
        for b, batch in enumerate(work):
            for i, final in enumerate(batch.finals):
                object.__setattr__(final, "key", keys[b * args.rows + i])
            batch.dispatched[:] = [f.key for f in batch.finals]

        t0 = time.perf_counter()
        for batch in work:
            redacted_batch(batch, Redactor.from_environ())
        redact_s = time.perf_counter() - t0

        t0 = time.perf_counter()
        for batch in work:
            items.write_batch(batch)
        write_s = time.perf_counter() - t0

    rows = args.batches * args.rows
    print(f"rows: {rows} in {args.batches} batches of {args.rows}")
    print(f"redaction alone:           {redact_s:.3f} s  ({rows / redact_s:,.0f} rows/s)")
    print(f"write_batch (incl. redaction): {write_s:.3f} s  ({rows / write_s:,.0f} rows/s)")
    print(f"redaction share of a commit:  {redact_s / write_s:.1%}")


if __name__ == "__main__":
    main()
