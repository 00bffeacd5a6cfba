"""The outputs of one input across a run's variants: (row, repeat) pairs of an all-mode
run, a page at a time, optionally only those whose outputs differ."""

from __future__ import annotations

from dataclasses import dataclass

from promptlab.errors import PromptlabError
from promptlab.store.connection import Store
from promptlab.store.runs import fetch_run


@dataclass(frozen=True)
class VariantOutput:
    variant: str
    status: str
    output_text: str | None
    error_kind: str | None
    latency_ms: float | None
    #: The item's idempotency key: its audit trace id.
    key: str | None = None


@dataclass(frozen=True)
class SideBySideRow:
    """One input (dataset row and repeat) as each variant answered it, in variant order."""

    row_index: int
    repeat: int
    outputs: list[VariantOutput]

    @property
    def differs(self) -> bool:
        return len({o.output_text for o in self.outputs}) > 1


@dataclass(frozen=True)
class SideBySidePage:
    run_id: str
    #: The run's variants in variant order (the columns to show).
    variants: list[str]
    rows: list[SideBySideRow]
    #: Inputs answered by two or more variants (that differ, with `only_different`).
    total: int
    offset: int
    limit: int


#: Inputs with two or more answers; `{extra}` narrows to outputs that differ.
_KEYS = (
    "SELECT row_index, repeat FROM results WHERE run_id = ? GROUP BY row_index, repeat "
    "HAVING count(*) > 1{extra}"
)
#: A failed answer (no text) differs from any text, including the empty one.
_DIFFERENT = " AND count(DISTINCT coalesce(output_text, chr(0) || status)) > 1"


class SideBySideReads:
    def __init__(self, store: Store) -> None:
        self.store = store

    def page(
        self, run_id: str, offset: int = 0, limit: int = 10, only_different: bool = False
    ) -> SideBySidePage:
        if offset < 0 or limit < 1:
            raise PromptlabError(
                f"side by side of run {run_id}: offset must be >= 0 and limit >= 1, "
                f"got offset={offset}, limit={limit}"
            )
        keys = _KEYS.format(extra=_DIFFERENT if only_different else "")
        with self.store.read() as cur:
            fetch_run(cur, run_id)
            variants = [
                r[0]
                for r in cur.execute(
                    "SELECT name FROM run_variants WHERE run_id = ? ORDER BY variant_index",
                    [run_id],
                ).fetchall()
            ]
            counted = cur.execute(f"SELECT count(*) FROM ({keys})", [run_id]).fetchone()
            rows = cur.execute(
                f"WITH page AS ({keys} ORDER BY row_index, repeat LIMIT ? OFFSET ?) "
                "SELECT r.row_index, r.repeat, r.variant, r.status, r.output_text, "
                "r.error_kind, r.latency_ms, r.idempotency_key "
                "FROM results r JOIN page USING (row_index, repeat) "
                "WHERE r.run_id = ? ORDER BY r.row_index, r.repeat",
                [run_id, limit, offset, run_id],
            ).fetchall()
        rank = {name: i for i, name in enumerate(variants)}
        grouped: dict[tuple[int, int], list[VariantOutput]] = {}
        for r in rows:
            grouped.setdefault((int(r[0]), int(r[1])), []).append(
                VariantOutput(r[2], r[3], r[4], r[5], r[6], r[7])
            )
        page_rows = [
            SideBySideRow(row, repeat, sorted(outs, key=lambda o: rank.get(o.variant, len(rank))))
            for (row, repeat), outs in grouped.items()
        ]
        total = int(counted[0]) if counted else 0
        return SideBySidePage(run_id, variants, page_rows, total, offset, limit)
