"""A run's final results as the repeat statistics read them (analysis/repeats.py)."""

from __future__ import annotations

from promptlab.records.repeats import RepeatResult
from promptlab.store.connection import Store
from promptlab.store.metrics import MetricsReads, completed_predicate

#: Every final result of a run, its variant's place first; params hold what was sent.
_RESULTS = (
    "SELECT r.variant, r.row_index, r.repeat, r.status = 'succeeded', ({done}), "
    "r.output_text, r.latency_ms, r.output_tokens, {logprobs}, "
    "TRY_CAST(json_extract_string(r.params, '$.temperature') AS DOUBLE), "
    "TRY_CAST(json_extract_string(r.params, '$.top_p') AS DOUBLE) "
    "FROM results r LEFT JOIN run_variants v ON v.run_id = r.run_id AND v.name = r.variant "
    "WHERE r.run_id = ? ORDER BY v.variant_index, r.variant, r.row_index, r.repeat"
)


class RepeatReads:
    def __init__(self, store: Store) -> None:
        self.store = store

    def results(self, run_id: str) -> dict[str, list[RepeatResult]]:
        """The run's final results per variant (in the run's variant order), each row's
        repeats in order."""
        with self.store.read() as cur:
            columns = MetricsReads(self.store).columns(cur)
            # A database not yet migrated to 0020 has no log-probabilities: none given.
            logprobs = (
                "r.logprob_mean, r.logprob_tokens"
                if "logprob_mean" in columns
                else "NULL::DOUBLE, NULL::INTEGER"
            )
            sql = _RESULTS.format(done=completed_predicate(columns), logprobs=logprobs)
            rows = cur.execute(sql, [run_id]).fetchall()
        found: dict[str, list[RepeatResult]] = {}
        for r in rows:
            found.setdefault(str(r[0]), []).append(
                RepeatResult(
                    row_index=int(r[1]),
                    repeat=int(r[2]),
                    succeeded=bool(r[3]),
                    completed=bool(r[4]),
                    output_text=r[5],
                    latency_ms=r[6],
                    output_tokens=r[7],
                    logprob_mean=r[8],
                    logprob_tokens=r[9],
                    temperature=r[10],
                    top_p=r[11],
                )
            )
        return found
