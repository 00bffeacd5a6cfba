"""`wb.cache`: the response cache runs answer identical requests from (`cache:` in a
spec, `--cache` on the run commands): what it holds, clearing it, a spec's mode set."""

from __future__ import annotations

from promptlab.analysis.compare import parse_since
from promptlab.engine import RunSpec
from promptlab.engine.send.cache import with_cache_mode
from promptlab.errors import ConfigError, PromptlabError
from promptlab.facades.context import Context
from promptlab.records.cache import CacheGroup, CacheStats
from promptlab.store.response_cache import ResponseCacheStore

__all__ = ["Cache", "CacheGroup", "CacheStats"]


class Cache:
    """Read and clear the response cache; set a spec's cache mode."""

    def __init__(self, context: Context) -> None:
        self._context = context
        self._rows = ResponseCacheStore(context.store)

    def stats(self) -> CacheStats:
        """Entries, bytes, answers given from the cache, oldest and newest, in all and
        per endpoint and model."""
        return self._rows.stats()

    def clear(self, older_than: str | None = None) -> int:
        """Remove every entry, or those stored longer ago than `older_than` (30d, 12h,
        2w, or a date); returns how many were removed. Recorded in the audit trail."""
        before = None
        if older_than is not None:
            try:
                before = parse_since(older_than, self._context.store.clock.now())
            except PromptlabError as exc:
                raise ConfigError(str(exc).replace("--since", "--older-than", 1)) from None
        removed = self._rows.clear(before)
        self._context.audit_change(
            "cache.cleared",
            self._context.author(),
            {"removed": removed, "older_than": older_than},
        )
        return removed

    def with_mode(self, spec: RunSpec, mode: str) -> RunSpec:
        """The spec with its cache mode set (`--cache`), stored with the run so a
        resume uses it too."""
        return with_cache_mode(spec, mode)
