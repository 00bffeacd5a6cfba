"""The response cache in DuckDB: answers by the hash of their request, loaded for a run,
put by the writer, summed for `promptlab cache stats`, cleared by age.

Only the hash of a request is kept (promptlab/engine/send/cache.py makes it), never the
request, and never a key. Outputs are redacted here as every stored output is (a server
may echo the key it was sent); the engine has masked them (PROMPTLAB_MASK) already.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from promptlab.audit.redact import Redactor
from promptlab.records.cache import CacheEntry, CacheGroup, CacheStats
from promptlab.store.connection import Store

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["ResponseCacheStore"]

#: The columns of `response_cache`, in CacheEntry's field order.
_COLUMNS = (
    "cache_key, endpoint, model, output_text, input_tokens, output_tokens, finish_reason, "
    "model_version, latency_ms, token_entropy, logprob_mean, logprob_tokens, source_run_id, "
    "created_at"
)
#: Rows read per fetch while a run's entries are loaded.
_FETCH_ROWS = 10_000


class ResponseCacheStore:
    """Reads and writes of `response_cache`; each call on its own cursor or transaction."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def load(
        self, pairs: Iterable[tuple[str, str]], max_entries: int, max_bytes: int
    ) -> list[CacheEntry]:
        """The newest entries of these (endpoint, model) pairs, up to `max_entries`
        entries and about `max_bytes` of output: what one run may answer from."""
        wanted = sorted(set(pairs))
        if not wanted or max_entries <= 0:
            return []
        endpoints = [e for e, _ in wanted]
        models = [m for _, m in wanted]
        found: list[CacheEntry] = []
        size = 0
        with self.store.read() as cur:
            cur.execute(
                f"SELECT {_COLUMNS} FROM response_cache JOIN (SELECT unnest(?) AS endpoint, "
                "unnest(?) AS model) USING (endpoint, model) ORDER BY created_at DESC LIMIT ?",
                [endpoints, models, max_entries],
            )
            while rows := cur.fetchmany(_FETCH_ROWS):
                for row in rows:
                    entry = CacheEntry(*row)
                    size += entry.size
                    if size > max_bytes:
                        return found
                    found.append(entry)
        return found

    def put(self, entries: Sequence[CacheEntry]) -> int:
        """Store answers (the last one per key wins; a key stored before is replaced);
        returns how many were written."""
        latest = {e.cache_key: e for e in entries}
        if not latest:
            return 0
        table = _table(list(latest.values()), Redactor.from_environ())
        with self.store.transaction() as tx:
            tx.register("w_cache", table)
            tx.execute(
                "DELETE FROM response_cache WHERE cache_key IN (SELECT cache_key FROM w_cache)"
            )
            tx.execute(f"INSERT INTO response_cache ({_COLUMNS}) SELECT {_COLUMNS} FROM w_cache")
        return len(latest)

    def stats(self) -> CacheStats:
        """Entries, their bytes and age, and the answers given from the cache (results
        with `cache_hit`), in all and per endpoint and model."""
        with self.store.read() as cur:
            groups = cur.execute(
                "WITH e AS (SELECT endpoint, model, count(*) AS entries, "
                "sum(strlen(output_text)) AS bytes, min(created_at) AS oldest, "
                "max(created_at) AS newest FROM response_cache GROUP BY ALL), "
                "h AS (SELECT endpoint, model, count(*) AS hits FROM results "
                "WHERE cache_hit GROUP BY ALL) "
                "SELECT endpoint, model, coalesce(e.entries, 0), coalesce(e.bytes, 0), "
                "coalesce(h.hits, 0), e.oldest, e.newest "
                "FROM e FULL JOIN h USING (endpoint, model) "
                "ORDER BY coalesce(e.bytes, 0) DESC, endpoint, model"
            ).fetchall()
        rows = tuple(
            CacheGroup(r[0], r[1], int(r[2]), int(r[3]), int(r[4]), r[5], r[6]) for r in groups
        )
        oldest = [g.oldest for g in rows if g.oldest is not None]
        newest = [g.newest for g in rows if g.newest is not None]
        return CacheStats(
            entries=sum(g.entries for g in rows),
            bytes=sum(g.bytes for g in rows),
            hits=sum(g.hits for g in rows),
            oldest=min(oldest) if oldest else None,
            newest=max(newest) if newest else None,
            groups=rows,
        )

    def clear(self, before: datetime | None = None) -> int:
        """Remove every entry (stored before `before`, when given); returns the count."""
        where, args = ("WHERE created_at < ?", [before]) if before is not None else ("", [])
        with self.store.transaction() as tx:
            found = tx.execute(f"SELECT count(*) FROM response_cache {where}", args).fetchone()
            tx.execute(f"DELETE FROM response_cache {where}", args)
        return int(found[0]) if found else 0


def _table(entries: Sequence[CacheEntry], redactor: Redactor) -> pa.Table:
    # pyarrow, as the writer's other batches (store/item_batches.py): imported when the
    # first answers are put, not when a run starts.
    import pyarrow as pa

    def column(name: str, typ: pa.DataType) -> pa.Array:
        return pa.array([getattr(e, name) for e in entries], typ)

    return pa.table(
        {
            "cache_key": column("cache_key", pa.string()),
            "endpoint": column("endpoint", pa.string()),
            "model": column("model", pa.string()),
            "output_text": pa.array([redactor(e.output_text) for e in entries], pa.string()),
            "input_tokens": column("input_tokens", pa.int32()),
            "output_tokens": column("output_tokens", pa.int32()),
            "finish_reason": column("finish_reason", pa.string()),
            "model_version": column("model_version", pa.string()),
            "latency_ms": column("latency_ms", pa.float64()),
            "token_entropy": column("token_entropy", pa.float64()),
            "logprob_mean": column("logprob_mean", pa.float64()),
            "logprob_tokens": column("logprob_tokens", pa.int32()),
            "source_run_id": column("source_run_id", pa.string()),
            "created_at": column("created_at", pa.timestamp("us", tz="UTC")),
        }
    )
