"""`after:`: when a run that comes after others may start, must wait, or is skipped.

At submit, each name in `after:` is resolved to the newest run of that name (the run
records which); from then on the run waits for those runs, whatever runs of the same
names come later. The engine asks `verdict` when the run is submitted or resumed, and
again whenever a run it waits for ends: nothing polls.

- Every one completed: start.
- One failed (or was skipped, which is failing too): skip, with its reason. A skipped
  run never sent anything; its own dependents are skipped in turn.
- Otherwise wait. A cancelled one is waited for too: cancel is not failure, and `resume`
  continues it (a server shutting down cancels what it runs, and what comes after them
  must not be lost with it).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from promptlab.engine.plan.prepare import PreparedRun
from promptlab.errors import PromptlabError, SpecError
from promptlab.records import RunStatus
from promptlab.store.runs import Dependency, RunStore

log = logging.getLogger(__name__)

#: The reason a skipped run ends with starts with this.
SKIPPED = "skipped"
CANCELLED_HINT = "cancelled: resume it, or cancel this run"


class Gate(StrEnum):
    START = "start"
    WAIT = "wait"
    SKIP = "skip"


@dataclass(frozen=True)
class Verdict:
    gate: Gate
    #: Why it waits or is skipped, naming the runs (None to start).
    reason: str | None = None


def verdict(dependencies: Sequence[Dependency]) -> Verdict:
    """What a run with these dependencies does now; see the module docstring."""
    failed = [d for d in dependencies if d.status == RunStatus.FAILED]
    if failed:
        first = failed[0]
        why = f": {first.reason}" if first.reason else ""
        return Verdict(Gate.SKIP, f"{SKIPPED}: {first.name} ({first.run_id}) failed{why}")
    open_ = [d for d in dependencies if d.status != RunStatus.COMPLETED]
    if not open_:
        return Verdict(Gate.START)
    parts = []
    for d in open_:
        state = CANCELLED_HINT if d.status == RunStatus.CANCELLED else d.status
        parts.append(f"{d.name} ({d.run_id}, {state})")
    return Verdict(Gate.WAIT, "after " + "; ".join(parts))


def resolve_after(runs: RunStore, names: Sequence[str]) -> list[tuple[str, str]]:
    """Each `after:` name with the newest run of that name, which the run waits for."""
    resolved = []
    for name in names:
        record = runs.newest_named(name)
        if record is None:
            raise SpecError(f"after: no run named {name!r} yet")
        resolved.append((name, record.run_id))
    return resolved


class WaitingRuns:
    """The engine's runs that wait (`after:`), released when what they wait for ends.

    It shares the engine's claims lock and sets (runs being started or resumed, cancels
    pressed meanwhile), so a run is waiting, claimed or active, never two at once, and
    a Cancel always finds it. `release` and `ended` read the store: never on the loop.
    """

    def __init__(
        self,
        runs: RunStore,
        lock: threading.Lock,
        claims: tuple[set[str], set[str]],
        *,
        start: Callable[[str, PreparedRun], None],
        skip: Callable[[str, str], None],
    ) -> None:
        self._runs = runs
        self._lock = lock
        self._claims, self._pending_cancels = claims
        self._start, self._skip = start, skip
        self._held: dict[str, tuple[PreparedRun, frozenset[str]]] = {}
        self._closed = False

    def __contains__(self, run_id: object) -> bool:
        return run_id in self._held  # callers may hold the lock: a dict lookup needs none

    def __bool__(self) -> bool:
        return bool(self._held)

    def hold(self, run_id: str, prepared: PreparedRun, dependencies: frozenset[str]) -> None:
        """Start the run now, skip it, or keep it until what it waits for ends."""
        with self._lock:
            self._held[run_id] = (prepared, dependencies)
        # Held first: a run that ends meanwhile finds it, or this sees the end.
        self.release(run_id)

    def drop(self, run_id: str) -> None:
        """Forget a run (cancelled): the caller holds the lock."""
        self._held.pop(run_id, None)

    def adopt(self, resume: Callable[[str], object]) -> list[str]:
        """`resume` every run the store has waiting that is not held here (left by a
        process that is gone); a resumed run waits here again, or starts or is skipped."""
        adopted = []
        for run_id in self._runs.waiting():
            if run_id in self._held:
                continue
            try:
                resume(run_id)
            except PromptlabError as exc:
                log.warning("run %s: left waiting: %s", run_id, exc)
                continue
            adopted.append(run_id)
        return adopted

    def close(self) -> None:
        """The engine is closing: the runs it cancels now start nothing."""
        self._closed = True

    def release(self, run_id: str) -> None:
        """Decide for a waiting run by its dependencies now."""
        found = verdict(self._runs.dependencies(run_id))
        with self._lock:
            if run_id not in self._held:
                return  # started, skipped or cancelled meanwhile
            if found.gate is Gate.WAIT:
                # Under the lock: a release that starts it cannot be overwritten by this.
                record = self._runs.get_run(run_id)
                # Also when only the owner changes (a run adopted from a process that is
                # gone): it waits here now, and says so, not "process gone".
                if (record.status, record.status_reason) != (RunStatus.WAITING, found.reason) or (
                    record.process_gone
                ):
                    self._runs.set_status(run_id, RunStatus.WAITING, found.reason)
                return
            prepared, _ = self._held.pop(run_id)
            self._claims.add(run_id)
        if found.gate is Gate.START:
            self._start(run_id, prepared)  # its launch takes the claim back
            return
        try:
            self._skip(run_id, str(found.reason))
        finally:
            with self._lock:
                self._claims.discard(run_id)
                self._pending_cancels.discard(run_id)
        self.ended(run_id)

    def ended(self, run_id: str) -> None:
        """A run reached its final state: decide again for every run waiting for it."""
        if self._closed:
            return
        with self._lock:
            dependents = [w for w, (_, deps) in self._held.items() if run_id in deps]
        for dependent in dependents:
            try:
                self.release(dependent)
            except Exception:  # noqa: BLE001 - one dependent's failure must not stop the rest
                log.exception("run %s: could not start after %s", dependent, run_id)
