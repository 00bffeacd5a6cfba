"""How fast outputs are checked, and what checking costs the engine's writer.

    PYTHONPATH=. .venv/bin/python bench/validation.py              # 100,000 outputs
    PYTHONPATH=. .venv/bin/python bench/validation.py --writer     # and the writer part

**Checks.** 100,000 stored-like outputs of the demo ticket-triage schema, mixed like a
sloppy model's: most valid, some in fences or prose, some needing repair (trailing
commas, single quotes, a missing brace), some breaking the schema, some cut off.
`promptlab.checks.validation` (the validator compiled once per schema) beside two baselines:
jsonschema building its validator for every output (no cache), and a bare `json.loads`
(parsing only, no schema, no extraction, no repair).

**Writer** (`--writer`): final rows through `ItemStore.write_batch` in batches of 2,000
(the writer's size), first without checks, then with each row checked as `run.py`
does before `writer.final`. Run it with `PYTHONPATH=/path/to/an/older/checkout` to time a
tree without checks: the check part is skipped there. Not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jsonschema

from promptlab.engine.plan.planner import AllVariants, plan_items
from promptlab.records import FinalRow, VariantRecord, WriteBatch
from promptlab.store import ItemStore, RunStore, Store

#: The demo ticket-triage 1.1.0 output schema (data/demo/ticket-triage.yaml).
SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["category", "priority", "summary", "needs_human"],
    "additionalProperties": False,
    "properties": {
        "category": {"type": "string", "enum": ["billing", "bug", "account", "feature_request"]},
        "priority": {"type": "string", "enum": ["low", "normal", "high", "urgent"]},
        "summary": {"type": "string", "maxLength": 200},
        "needs_human": {"type": "boolean"},
    },
}
AT = datetime(2025, 1, 1, tzinfo=UTC)
RUN = "run_bench_checks"
WRITE_ROWS = 2_000


def outputs(n: int, seed: int = 7) -> list[tuple[str, str]]:
    """(text, finish_reason) pairs: 70% valid as written, the rest flawed in common ways."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        value = {
            "category": rng.choice(["billing", "bug", "account"]),
            "priority": rng.choice(["low", "normal", "high"]),
            "summary": f"Customer {i} reports a problem with the invoice of last month",
            "needs_human": rng.random() < 0.3,
        }
        text = json.dumps(value)
        draw = rng.random()
        finish = "stop"
        if draw < 0.05:
            text = f"Here is the JSON you asked for:\n```json\n{text}\n```"
        elif draw < 0.10:
            text = text[:-1] + ",}"
        elif draw < 0.14:
            text = text.replace('"', "'")
        elif draw < 0.17:
            text = text.rstrip("}")
        elif draw < 0.25:
            value["priority"] = 3
            del value["summary"]
            text = json.dumps(value)
        elif draw < 0.30:
            text, finish = text[: len(text) // 2], "length"
        out.append((text, finish))
    return out


def rate(label: str, n: int, call: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    call()
    seconds = time.perf_counter() - t0
    print(f"  {label:<58} {seconds:6.2f} s  {n / seconds:>10,.0f} outputs/s")
    return n / seconds


def bench_checks(n: int) -> None:
    from promptlab.checks.validation import CheckStatus, checker_for

    data = outputs(n)
    found: dict[CheckStatus, int] = {}

    def checked() -> None:
        checker = checker_for(SCHEMA)
        for text, finish in data:
            status = checker.check(text, finish).status
            found[status] = found.get(status, 0) + 1

    def uncached() -> None:
        for text, _finish in data:
            try:
                value = json.loads(text)
            except ValueError:
                continue
            list(jsonschema.Draft202012Validator(SCHEMA).iter_errors(value))

    def loads_only() -> None:
        for text, _finish in data:
            try:  # noqa: SIM105 - suppress() would slow the baseline down
                json.loads(text)
            except ValueError:
                pass

    print(f"{n:,} outputs against the ticket-triage schema")
    ours = rate("promptlab.checks.validation (compiled once, extract + repair)", n, checked)
    slow = rate("baseline: json.loads + a new validator per output", n, uncached)
    bare = rate("baseline: json.loads only (no schema, no repair)", n, loads_only)
    print("  statuses: " + ", ".join(f"{s} {c}" for s, c in sorted(found.items())))
    print(f"  compiled checker vs validator per output: {ours / slow:.1f}x the rate")
    print(f"  compiled checker vs bare json.loads: {ours / bare:.2f}x the rate")


def _store_with_items(store: Store, n: int) -> list[Any]:
    record = VariantRecord(0, "v", "p@1.0.0", "sha256:0", "sim", "fast", {}, {})
    RunStore(store).create_run(RUN, "bench", {}, [record])
    items = ItemStore(store)
    data = ({"text": f"ticket {i}"} for i in range(n))
    items.plan_items(RUN, plan_items(RUN, data, ["v"], AllVariants(1), 1))
    pending: list[Any] = []
    after = -1
    while chunk := items.pending_chunk(RUN, after, [0], 10_000):
        pending += chunk
        after = chunk[-1].seq
    return pending


def bench_writer(n: int) -> None:
    has_checks = "check_status" in {f.name for f in fields(FinalRow)}
    data = outputs(n)
    print(f"{n:,} final rows through ItemStore.write_batch, {WRITE_ROWS:,} a batch")
    modes = ("plain", "stored", "checked") if has_checks else ("plain",)
    labels = {
        "plain": "written (no check fields)",
        "stored": "written with check fields (checked beforehand, not timed)",
        "checked": "checked as run.py does, then written",
    }
    for mode in modes:
        with tempfile.TemporaryDirectory() as tmp, Store(Path(tmp) / "b.duckdb") as store:
            pending = _store_with_items(store, n)
            items = ItemStore(store)
            checker = None
            checks: dict[int, dict[str, Any]] = {}
            if mode != "plain":
                from promptlab.checks.validation import checker_for

                checker = checker_for(SCHEMA)
            if mode == "stored":
                assert checker is not None
                for item in pending:
                    check = checker.check(*data[item.seq])
                    checks[item.seq] = {
                        "check_status": check.status.value,
                        "check_errors": check.errors,
                    }
            t0 = time.perf_counter()
            for start in range(0, n, WRITE_ROWS):
                batch = WriteBatch()
                for item in pending[start : start + WRITE_ROWS]:
                    text, finish = data[item.seq]
                    extra: dict[str, Any] = checks.get(item.seq, {})
                    if mode == "checked":
                        assert checker is not None
                        check = checker.check(text, finish)
                        extra = {"check_status": check.status.value, "check_errors": check.errors}
                    batch.finals.append(
                        FinalRow(
                            key=item.key,
                            run_id=RUN,
                            seq=item.seq,
                            row_index=item.row_index,
                            variant="v",
                            repeat=0,
                            status="succeeded",
                            prompt_version_id="sha256:0",
                            endpoint="sim",
                            model="fast",
                            params={},
                            attempts=1,
                            finished_at=AT,
                            output_text=text,
                            input_tokens=40,
                            output_tokens=20,
                            finish_reason=finish,
                            latency_ms=200.0,
                            **extra,
                        )
                    )
                items.write_batch(batch)
            seconds = time.perf_counter() - t0
            print(f"  {labels[mode]:<58} {seconds:6.2f} s  {n / seconds:>10,.0f} rows/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--outputs", type=int, default=100_000)
    parser.add_argument("--writer", action="store_true", help="also time the writer")
    parser.add_argument("--writer-only", action="store_true")
    args = parser.parse_args()
    if not args.writer_only:
        bench_checks(args.outputs)
    if args.writer or args.writer_only:
        bench_writer(args.outputs)


if __name__ == "__main__":
    sys.exit(main())
