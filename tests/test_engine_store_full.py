"""A store that cannot write (a full disk) pauses dispatch and loses no answered request.

The first test fills a real small file system under the database (root only: it mounts a
tmpfs); the second makes a real ItemStore and RunStore refuse writes with DuckDB's own error, so the
same guarantees are checked on every machine.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from promptlab.engine import Engine, parse_spec
from promptlab.engine.record.spill import spill_dirs, spilled_files
from promptlab.engine.testing import ScriptedProvider
from promptlab.providers.base import CompletionRequest
from promptlab.providers.config import EndpointConfig
from promptlab.records import RunStatus, WriteBatch
from promptlab.store import ItemStore, RunStore, Store

ITEMS = 400


class WatchedItemStore(ItemStore):
    """A real ItemStore that notes how many requests had gone out when a write first failed."""

    def __init__(self, store: Store) -> None:
        super().__init__(store)
        self.provider: ScriptedProvider | None = None
        self.sent_at_first_failure: int | None = None

    def write_batch(self, batch: WriteBatch) -> None:
        try:
            self._write(batch)
        except Exception:
            if self.sent_at_first_failure is None and self.provider is not None:
                self.sent_at_first_failure = sum(self.provider.calls.values())
            raise

    def _write(self, batch: WriteBatch) -> None:
        super().write_batch(batch)


class Disk:
    """A disk that can be declared full: every write then fails as DuckDB's does."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.full = False

    def refuse(self) -> None:
        if self.full:
            raise duckdb.TransactionException(
                "TransactionContext Error: Failed to commit: Could not write file "
                f'"{self.store.path}.wal": No space left on device'
            )


class FillableItemStore(WatchedItemStore):
    """Item writes that fail once `disk` is full."""

    def __init__(self, disk: Disk) -> None:
        super().__init__(disk.store)
        self.disk = disk

    def _write(self, batch: WriteBatch) -> None:
        self.disk.refuse()
        super()._write(batch)

    def cancel_open_items(self, run_id: str, reason: str) -> int:
        self.disk.refuse()
        return super().cancel_open_items(run_id, reason)


class FillableRunStore(RunStore):
    """Run status changes that fail once `disk` is full."""

    def __init__(self, disk: Disk) -> None:
        super().__init__(disk.store)
        self.disk = disk

    def set_status(self, run_id: str, status: RunStatus, reason: str | None = None) -> None:
        self.disk.refuse()
        super().set_status(run_id, status, reason)


def make_spec(dataset: Path) -> object:
    return parse_spec(
        {
            "name": "disk",
            "dataset": str(dataset),
            "variants": [
                {
                    "name": "v",
                    "messages": [{"role": "user", "content": "{{ text }}"}],
                    "model": "fake:m",
                    "params": {"max_tokens": 400},
                }
            ],
        }
    )


@pytest.fixture
def quick_stall(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr("promptlab.engine.record.writer.STALL_STOP_S", 1.0)
    monkeypatch.setattr("promptlab.engine.record.writer.RETRY_FLUSH_S", 0.05)
    # Spills that miss the database's folder go to this test's temp folder.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))


def run_until_the_disk_fills(
    store: Store,
    items: WatchedItemStore,
    dataset: Path,
    fill: object,
    runs: RunStore | None = None,
) -> tuple[str, ScriptedProvider]:
    provider = ScriptedProvider(latency_s=0.02)
    items.provider = provider

    def on_request(_request: CompletionRequest, _n: int) -> None:
        if sum(provider.calls.values()) == ITEMS // 4:
            fill()  # type: ignore[operator]
        return None

    provider.fault = on_request
    endpoints = {"fake": EndpointConfig(name="fake", kind="openai", concurrency=8)}
    factory = lambda _c: provider  # noqa: E731
    with Engine(store, endpoints=endpoints, provider_factory=factory, runs=runs, items=items) as e:
        run_id = e.submit(make_spec(dataset))  # type: ignore[arg-type]
        progress = e.wait(run_id, timeout=60)
        assert progress.status == "failed", progress
        assert progress.reason is not None and "No space left on device" in progress.reason
        assert str(store.path) in progress.reason  # the path, from DuckDB's own message
    # Dispatch paused once the writer saw the failure: after it went out only what was
    # in flight (concurrency 8), plus what slipped through while the failed commit's
    # thread handed back to the loop (a few, allowed for with another 8).
    assert items.sent_at_first_failure is not None
    assert sum(provider.calls.values()) <= items.sent_at_first_failure + 2 * 8 < ITEMS
    # What /metrics reports of it: the failed commits, and the one spill at close.
    stats = e.writer_stats()
    assert stats.failed_commits >= 1 and stats.spills == 1 and stats.spilled_rows > 0
    assert stats.commits >= 1 and sum(stats.bucket_counts) == stats.commits
    return run_id, provider


def resume_after_space_is_freed(store: Store, run_id: str, provider: ScriptedProvider) -> None:
    answered_before = set(provider.successes)
    assert spilled_files(spill_dirs(store.path)), "held answers were not spilled"
    endpoints = {"fake": EndpointConfig(name="fake", kind="openai", concurrency=8)}
    provider.fault = None
    with Engine(store, endpoints=endpoints, provider_factory=lambda _c: provider) as engine:
        assert spilled_files(spill_dirs(store.path)) == []  # ingested first
        engine.resume(run_id)
        progress = engine.wait(run_id, timeout=60)
    assert progress.status == "completed" and progress.succeeded == ITEMS
    # Nothing answered before the disk filled was sent again.
    assert all(provider.calls[key] == 1 for key in answered_before)
    with store.read() as cur:
        (finals,) = cur.execute(
            "SELECT count(*) FROM results WHERE run_id = ?", [run_id]
        ).fetchone() or (0,)
        attempts = cur.execute(
            "SELECT idempotency_key, count(*) FROM attempts WHERE run_id = ? "
            "GROUP BY ALL HAVING count(*) > 1",
            [run_id],
        ).fetchall()
    assert finals == ITEMS and attempts == []


def write_dataset(path: Path) -> Path:
    path.write_text("text\n" + "".join(f"row {i} {'x' * 200}\n" for i in range(ITEMS)))
    return path


def test_a_store_that_refuses_writes_pauses_dispatch_and_keeps_every_answer(
    tmp_path: Path, db_path: Path, quick_stall: None
) -> None:
    dataset = write_dataset(tmp_path / "rows.csv")
    with Store(db_path) as store:
        disk = Disk(store)
        run_id, provider = run_until_the_disk_fills(
            store,
            FillableItemStore(disk),
            dataset,
            lambda: setattr(disk, "full", True),
            runs=FillableRunStore(disk),
        )
        resume_after_space_is_freed(store, run_id, provider)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "small"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small file system needs root")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(mount)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_real_full_disk_pauses_dispatch_and_keeps_every_answer(
    tmp_path: Path, small_disk: Path, quick_stall: None
) -> None:
    dataset = write_dataset(tmp_path / "rows.csv")
    ballast = small_disk / "ballast"

    def fill() -> None:
        if ballast.exists():
            return
        # Every byte the file system has left (opening may already meet a full disk).
        with contextlib.suppress(OSError), ballast.open("wb") as handle:
            while True:
                handle.write(b"\0" * 65536)
                handle.flush()

    with Store(small_disk / "runs.duckdb") as store:
        run_id, provider = run_until_the_disk_fills(store, WatchedItemStore(store), dataset, fill)
        ballast.unlink()
        resume_after_space_is_freed(store, run_id, provider)
