"""What `audit verify` found: each chain's status and first problem, each audited run's
rows against their events, and the report that gathers them (promptlab/audit/chain.py
walks the chains, promptlab/audit/checks.py the rows; both fill these records)."""

from __future__ import annotations

from dataclasses import dataclass, field

#: Mismatches kept per run with their detail (all are counted): a million edited rows
#: must not make a million-line report.
MAX_MISMATCHES_KEPT = 20


@dataclass(frozen=True)
class RowMismatch:
    """A stored row that differs from what the audit recorded about it."""

    run_id: str
    table: str  # "results" or "attempts"
    key: str
    attempt: int | None
    what: str  # "modified", "deleted" or "inserted"
    detail: str

    def __str__(self) -> str:
        which = f"{self.table} row of item {self.key}"
        if self.attempt is not None:
            which += f" attempt {self.attempt}"
        return f"run {self.run_id}: {which} {self.what}: {self.detail}"


@dataclass
class RunRows:
    """One run's rows as verify found them: counts, and the first mismatches in full."""

    run_id: str
    #: Rows that match their events.
    results: int = 0
    attempts: int = 0
    #: Rows whose events predate the row hashes: found, not checked.
    unhashed: int = 0
    #: `cancelled` rows a cancel wrote in bulk, without an event, holding no answer.
    closed: int = 0
    #: Rows no event records in a run not audited from its submission.
    unaudited: int = 0
    mismatched: int = 0
    mismatches: list[RowMismatch] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.mismatched == 0

    def wants_detail(self) -> bool:
        """Whether the next mismatch is kept (and worth a lookup for its detail)."""
        return len(self.mismatches) < MAX_MISMATCHES_KEPT

    def add(self, table: str, key: str, attempt: int | None, what: str, detail: str = "") -> None:
        self.mismatched += 1
        if self.wants_detail():
            self.mismatches.append(RowMismatch(self.run_id, table, key, attempt, what, detail))


@dataclass(frozen=True)
class ChainProblem:
    """The first thing wrong with a chain: what, at which seq / event."""

    chain: str
    seq: int
    event_id: str
    #: "modified", "deleted" or "inserted" (an event); for the chain as a whole (no
    #: event_id), against its anchor: "tail cut", "missing chain" or "not anchored".
    what: str
    detail: str

    def __str__(self) -> str:
        if not self.event_id:
            return f"chain {self.chain} {self.what}: {self.detail}"
        return (
            f"chain {self.chain}: event seq {self.seq} ({self.event_id}) {self.what}: {self.detail}"
        )


@dataclass(frozen=True)
class ChainStatus:
    chain: str
    events: int
    head_seq: int
    head_hash: str
    anchored: bool
    problem: ChainProblem | None = None

    @property
    def ok(self) -> bool:
        return self.problem is None


@dataclass(frozen=True)
class VerifyReport:
    chains: tuple[ChainStatus, ...] = field(default_factory=tuple)
    #: Each audited run's rows against its events (promptlab/audit/checks.py); empty when
    #: only the chains were verified.
    runs: tuple[RunRows, ...] = field(default_factory=tuple)
    #: Runs holding rows but made with the audit off (no chain, no run.submitted event).
    unaudited: tuple[str, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.chains) and all(r.ok for r in self.runs)

    @property
    def problems(self) -> list[ChainProblem | RowMismatch]:
        """Each broken chain's first problem, then each run's first row mismatches."""
        found: list[ChainProblem | RowMismatch] = [
            c.problem for c in self.chains if c.problem is not None
        ]
        for run in self.runs:
            found.extend(run.mismatches)
        return found
