"""Replaying conversation logs: many sessions (`history: logged` beside `generated`),
one very long session, and a large log; time, messages sent and peak memory as each
grows tenfold.

    PYTHONPATH=. .venv/bin/python bench/conversations.py [--case CASE] [--full]

Each case runs a small size and the tenfold size, each size (and history mode) in a
fresh process that imports the log and replays it through one inline version on the
simulated model answering at once (a providers file with `latency_scale: 0` and no
rate limit to speak of). A process reports its requests, the messages its requests
carried (counted at the provider), its seconds, and its peak RSS (VmHWM: the whole
process, import included). The cases (`--full` sizes in brackets):

- `sessions`: 100 and 1,000 [1,000 and 10,000] sessions of 10 turns, logged history
  beside generated (its turns wait for the one before: the price of the ordering).
- `window`: one session of 1,000 and 10,000 [10,000 and 100,000] user turns, logged,
  on a model whose 4,000-token window holds about 250 messages: every turn after the
  first few hundred is sent with its context shard.
- `logged`: one session of 20 and 200 [200 and 2,000] user turns, logged, on a model
  whose window holds the whole session: every turn is sent with its whole history, so
  the messages sent grow with the square of the turns.
- `log`: a log of 10,000 and 100,000 [100,000 and 1,000,000] messages (sessions of 10
  turns), logged.

Time is linear in the messages sent when the tenfold size's seconds per message sent
are those of the small one (the ratio printed). Not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
#: The simulated endpoint; {window} is the model's context window in tokens.
PROVIDERS = (
    "endpoints:\n  sim:\n    kind: sim\n    latency_scale: 0\n    rpm: 6000000\n"
    "    tpm: 100000000000\n    concurrency: 64\n"
    "    models:\n      fast: {{context_window: {window}}}\n"
)
#: Per case: (history modes, small size, tenfold size, `--full` small, `--full` tenfold,
#: window tokens). A size is sessions (`sessions`), turns (`window`, `logged`) or
#: messages (`log`).
CASES: dict[str, tuple[tuple[str, ...], int, int, int, int, int]] = {
    "sessions": (("logged", "generated"), 100, 1_000, 1_000, 10_000, 16_000),
    "window": (("logged",), 1_000, 10_000, 10_000, 100_000, 4_000),
    "logged": (("logged",), 20, 200, 200, 2_000, 10_000_000),
    "log": (("logged",), 10_000, 100_000, 100_000, 1_000_000, 16_000),
}
TURNS_PER_SESSION = 10


def write_log(path: Path, sessions: int, turns: int) -> None:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["session_id", "turn", "role", "content"])
        for s in range(sessions):
            for t in range(turns):
                writer.writerow([f"s{s}", 2 * t, "user", f"Question {t} about order {s}?"])
                writer.writerow([f"s{s}", 2 * t + 1, "assistant", f"Answer {t} for order {s}."])


def log_shape(case: str, size: int) -> tuple[int, int]:
    """(sessions, user turns per session) of a case's log at `size`."""
    if case == "sessions":
        return size, TURNS_PER_SESSION
    if case == "log":
        return size // (2 * TURNS_PER_SESSION), TURNS_PER_SESSION
    return 1, size


def peak_rss_mb() -> float:
    """This process's peak resident set (VmHWM), in MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def replay(db: Path, log: Path, history: str) -> dict[str, Any]:
    """In this process: import the log, then replay it; figures of the replay."""
    from promptlab.config import Settings
    from promptlab.providers.sim import SimProvider
    from promptlab.records.datasets import DEFAULT_CONVERSATION
    from promptlab.workbench import Workbench

    sent = [0]
    answer = SimProvider.complete

    async def counted(self: SimProvider, request: Any) -> Any:
        sent[0] += len(request.messages)
        return await answer(self, request)

    SimProvider.complete = counted  # type: ignore[method-assign]
    with Workbench.open(Settings.from_env().with_db(db)) as wb:
        started = time.perf_counter()
        wb.datasets.import_file(log, "log", conversation=DEFAULT_CONVERSATION)
        imported = time.perf_counter() - started
        spec = wb.runs.spec_from_data(
            {
                "name": "replay",
                "dataset": "log",
                "history": history,
                "variants": [
                    {
                        "model": "sim:fast",
                        "params": {"max_tokens": 16},
                        "messages": [
                            {"role": "system", "content": "You are a support agent."},
                            {"role": "user", "content": "{{ content }}"},
                        ],
                    }
                ],
            }
        )
        started = time.perf_counter()
        run_id = wb.runs.start(spec)
        progress = wb.runs.wait(run_id)
        seconds = time.perf_counter() - started
        per_session = wb.analysis.sessions(run_id)
        shards = len(wb.runs.shards(run_id))
    assert progress.status == "completed", progress.status
    return {
        "requests": progress.succeeded,
        "seconds": seconds,
        "import_seconds": imported,
        "messages_sent": sent[0],
        "shards": shards,
        "completed_sessions": per_session[0].completed,
        "peak_rss_mb": peak_rss_mb(),
    }


def measure(case: str, size: int, history: str, folder: Path) -> dict[str, Any]:
    """One size of a case in a fresh process (its peak memory its own)."""
    sessions, turns = log_shape(case, size)
    log = folder / f"{case}-{size}.csv"
    if not log.exists():
        write_log(log, sessions, turns)
    providers = folder / f"providers-{case}.yaml"
    providers.write_text(PROVIDERS.format(window=CASES[case][5]), encoding="utf-8")
    env = {
        "PROMPTLAB_PROVIDERS": str(providers),
        "PROMPTLAB_DEMO": "0",
        "PROMPTLAB_AUDIT": "1",
        "PYTHONPATH": str(REPO_ROOT),
    }
    db = folder / f"{case}-{history}-{size}.duckdb"
    out = subprocess.run(
        [sys.executable, __file__, "--one", str(db), str(log), history],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
    )
    if out.returncode:
        sys.exit(f"{case} at {size:,} ({history}) failed:\n{out.stderr[-3000:]}")
    figures = json.loads(out.stdout.strip().splitlines()[-1])
    return {
        **figures,
        "case": case,
        "size": size,
        "sessions": sessions,
        "turns": turns,
        "history": history,
    }


def report(f: dict[str, Any]) -> str:
    shape = f"{f['sessions']:,} sessions x {f['turns']:,} turns"
    return (
        f"{f['case']:>8} {f['history']:>9}: {shape:>26}: {f['requests']:>8,} requests, "
        f"{f['messages_sent']:>11,} messages sent in {f['seconds']:7.1f} s "
        f"({f['requests'] / f['seconds']:5.0f} req/s, "
        f"{f['seconds'] * 1e6 / f['messages_sent']:6.2f} us/message; "
        f"import {f['import_seconds']:.1f} s), {f['shards']:,} shards, "
        f"{f['completed_sessions']:,} sessions completed, peak RSS {f['peak_rss_mb']:.0f} MB"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", choices=(*CASES, "all"), default="all")
    parser.add_argument("--full", action="store_true", help="the sizes the README reports")
    parser.add_argument("--one", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        db, log, history = args.one
        print(json.dumps(replay(Path(db), Path(log), history)))
        return
    cases = list(CASES) if args.case == "all" else [args.case]
    with tempfile.TemporaryDirectory() as tmp:
        for case in cases:
            modes, small, large, full_small, full_large, _window = CASES[case]
            sizes = (full_small, full_large) if args.full else (small, large)
            figures: dict[tuple[str, int], dict[str, Any]] = {}
            for size in sizes:
                for history in modes:
                    figures[history, size] = found = measure(case, size, history, Path(tmp))
                    print(report(found), flush=True)
            for history in modes:
                a, b = figures[history, sizes[0]], figures[history, sizes[1]]
                per_a = a["seconds"] / a["messages_sent"]
                per_b = b["seconds"] / b["messages_sent"]
                grown = b["messages_sent"] / a["messages_sent"]
                print(
                    f"{case:>8} {history:>9}, tenfold: {grown:.1f}x the messages sent, "
                    f"{b['seconds'] / a['seconds']:.1f}x the time, "
                    f"{per_b / per_a:.2f}x the time per message sent, "
                    f"{b['peak_rss_mb'] / a['peak_rss_mb']:.2f}x the peak RSS",
                    flush=True,
                )
            if len(modes) == 2:
                for n in sizes:
                    logged, generated = figures["logged", n], figures["generated", n]
                    print(
                        f"{case:>8} generated / logged at {n:,}: "
                        f"{generated['seconds'] / logged['seconds']:.2f}x the time, "
                        f"{generated['peak_rss_mb'] / logged['peak_rss_mb']:.2f}x the peak "
                        "RSS",
                        flush=True,
                    )


if __name__ == "__main__":
    main()
