"""`audit verify` on a million results: the hash chains alone, then with every stored
row checked against its event as well.

    PYTHONPATH=. .venv/bin/python bench/audit_verify.py                  # 1,000,000 results
    PYTHONPATH=. .venv/bin/python bench/audit_verify.py --results 100000 --repeats 1
    PYTHONPATH=. .venv/bin/python bench/audit_verify.py --keep /tmp/verify.duckdb  # reuse

Builds one run of `--results` items the way the engine stores them: each batch's
results, attempts and trace events in one `ItemStore.write_batch` (so the result events
carry `result_sha256` and `attempt_sha256` of the rows as stored, and the anchors move
with them), an item in 20 answered on its second attempt (the first, a 500, has its own
event), one in 50 failed after two such attempts; `run.submitted` before and `run.ended`
after, as the executor records them. Then runs verify in a fresh process per mode,
`--repeats` times each, alternately: `chains` (`AuditLog.verify(rows=False)`: the hash
chains and their anchors, what verify checked before it checked rows) and `rows` (the
default: also every results and attempts row against its event). Prints each run's
seconds and the process's peak RSS (ru_maxrss), and what verify found; asserts nothing.

A database built by an older promptlab (no `audit_anchors`) is anchored by migration
0010 when a mode first opens it; `--keep` a copy to time the code before this change
against the same file.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

RUN = "run_bench_verify"
#: Items per write_batch (one transaction, like a large engine batch).
BATCH = 5_000
#: One item in RETRY_EVERY fails once (a 500) before its answer; one in FAIL_EVERY fails
#: twice and is given up on.
RETRY_EVERY = 20
FAIL_EVERY = 50
MODES = ("chains", "rows")


def build(path: Path, results: int) -> None:
    """Store one audited run of `results` items at `path` (see the module docstring)."""
    from promptlab.audit.chain import RUN_SUBMITTED, run_chain
    from promptlab.engine.plan.planner import AllVariants, plan_items
    from promptlab.records import VariantRecord, WriteBatch
    from promptlab.store import ItemStore, RunStore, Store
    from promptlab.store.audit import AuditLog

    t0 = time.perf_counter()
    with Store(path) as store:
        variant = VariantRecord(0, "only", "bench@1.0.0", "sha256:bench", "sim", "fast", {}, {})
        RunStore(store).create_run(RUN, "bench", {"variants": ["only"]}, [variant])
        log = AuditLog(store)
        log.record_change(RUN_SUBMITTED, "bench", {"chain": run_chain(RUN)}, run_id=RUN)
        items = ItemStore(store)
        data = ({"text": f"ticket number {i} about billing"} for i in range(results))
        items.plan_items(RUN, plan_items(RUN, data, ["only"], AllVariants(1), 1))
        at = datetime.now(UTC) - timedelta(days=1)
        after = -1
        while chunk := items.pending_chunk(RUN, after, [0], BATCH):
            after = chunk[-1].seq
            batch = WriteBatch()
            for item in chunk:
                _item_rows(batch, item, at + timedelta(milliseconds=item.seq))
            items.write_batch(batch)
        log.record_run_end(RUN, "bench", {"status": "completed", "reason": None})
        with store.read() as cur:
            (events,) = cur.execute("SELECT count(*) FROM audit_events").fetchall()[0]
    took = time.perf_counter() - t0
    print(f"built {results:,} results and {events:,} events in {took:.0f} s: {path}")


def _item_rows(batch: Any, item: Any, at: datetime) -> None:
    """One item's attempts, final row and trace events, as the engine makes them."""
    from promptlab.audit.chain import AuditDraft, attempt_values, row_digest, run_chain
    from promptlab.engine.record import trace
    from promptlab.records import AttemptRow, FinalRow

    failures = 2 if item.seq % FAIL_EVERY == 0 else 1 if item.seq % RETRY_EVERY == 0 else 0
    chain = run_chain(RUN)
    stages = trace.render_stage(item.values, [{"role": "user", "content": item.values["text"]}])
    stages |= trace.preflight_stage(12, 64, 128_000)
    for n in range(1, failures + 1):
        failed = AttemptRow(
            item.key,
            RUN,
            n,
            at,
            at,
            "error",
            "server",
            500,
            "HTTP 500: server error",
            10.0 * n,
            "backoff",
            None,
            3.25,
        )
        batch.attempts.append(failed)
        payload = trace.attempt_payload(failed, None)
        batch.audit.append(
            AuditDraft(chain, "attempt", f"{item.key}/a{n}", at, payload, "engine", RUN, item.key)
        )
    answered = failures < 2
    if answered:
        row = AttemptRow(
            item.key, RUN, failures + 1, at, at, "ok", None, None, None, 0.0, None, None, 812.5
        )
        batch.attempts.append(row)
        stages["attempt_sha256"] = row_digest(attempt_values(row))
    final = FinalRow(
        key=item.key,
        run_id=RUN,
        seq=item.seq,
        row_index=item.row_index,
        variant="only",
        repeat=item.repeat,
        status="succeeded" if answered else "failed",
        prompt_version_id="sha256:bench",
        endpoint="sim",
        model="fast",
        params={},
        attempts=failures + (1 if answered else 0),
        finished_at=at,
        error_kind=None if answered else "server",
        error_message=None if answered else "HTTP 500: server error",
        output_text='{"category": "billing"}' if answered else None,
        input_tokens=12 if answered else None,
        output_tokens=9 if answered else None,
        finish_reason="stop" if answered else None,
        latency_ms=812.5 if answered else None,
        cost_usd=0.00002 if answered else None,
        check_status="no_schema" if answered else None,
    )
    batch.finals.append(final)
    batch.audit.append(
        AuditDraft(
            chain,
            "result",
            f"{item.key}/final/{final.attempts}",
            at,
            trace.result_payload(final, stages, None),
            "engine",
            RUN,
            item.key,
        )
    )


def child(mode: str, path: Path) -> None:
    """One verify in this fresh process: prints its seconds, peak RSS and findings."""
    from promptlab.store import Store
    from promptlab.store.audit import AuditLog

    with Store(path) as store:
        t0 = time.perf_counter()
        report = AuditLog(store).verify(rows=mode == "rows")
        took = time.perf_counter() - t0
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    found = {
        "seconds": took,
        "rss_mb": rss_mb,
        "ok": report.ok,
        "events": sum(c.events for c in report.chains),
        "results": sum(r.results for r in report.runs),
        "attempts": sum(r.attempts for r in report.runs),
        "problems": [str(p) for p in report.problems][:3],
    }
    print(json.dumps(found))


def measure(path: Path, repeats: int) -> None:
    seen: dict[str, list[dict[str, Any]]] = {mode: [] for mode in MODES}
    for _ in range(repeats):
        for mode in MODES:
            out = subprocess.run(
                [sys.executable, __file__, "--child", mode, "--keep", str(path)],
                check=True,
                capture_output=True,
                text=True,
            )
            found = json.loads(out.stdout.strip().splitlines()[-1])
            seen[mode].append(found)
            print(
                f"  {mode:<6} {found['seconds']:7.1f} s, peak RSS {found['rss_mb']:6.0f} MB; "
                f"ok={found['ok']} events={found['events']:,} results={found['results']:,} "
                f"attempts={found['attempts']:,} {found['problems']}"
            )
    for mode, runs in seen.items():
        seconds = statistics.median(r["seconds"] for r in runs)
        rss = max(r["rss_mb"] for r in runs)
        print(f"{mode:<6} median {seconds:.1f} s over {len(runs)}, peak RSS {rss:.0f} MB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--keep", type=Path, help="database to build once and reuse")
    parser.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.keep)
        return
    with tempfile.TemporaryDirectory() as tmp:
        path = args.keep or Path(tmp) / "verify.duckdb"
        if not path.exists():
            build(path, args.results)
        measure(path, args.repeats)


if __name__ == "__main__":
    main()
