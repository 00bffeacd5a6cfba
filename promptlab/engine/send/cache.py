"""The response cache in a run (`cache:`): an identical request answered from an answer
kept in the store, and the run's own answers kept for the next one.

A request's key is the sha256 of a canonical JSON of what decides its answer: the
endpoint (name, kind, address), the model, and the request as sent (messages,
max_tokens, temperature, top_p, seed, output schema, extra fields, top_logprobs, and
which repeat of its row it is). Never a key, and nothing that changes between sends
(request id, item key, attempt, deadline, timeout). Only repeatable requests are
cached (temperature 0, or a seed) unless the spec says `any_temperature: true`.

An entry answers an item only when its output passes the variant's checks as they
are now (schema and rules; the rules are not sent, so they are not in the key): one
that does not is a miss, said once per variant, and the request is sent again.

What a run can hit is read once at its start, off the loop and bounded (the newest
entries of its endpoints and models); its own answers join that index as they come,
so an identical request later in the run hits too. Answers are put through the one
writer (engine/record/writer.py), best effort: an answer not cached is only sent again.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import orjson

from promptlab.checks.rules import RuleStatus
from promptlab.checks.validation import Checker, CheckStatus, OutputCheck
from promptlab.clock import Clock
from promptlab.engine.record.writer import BatchWriter
from promptlab.engine.send.lanes import Lane
from promptlab.engine.spec.fields import CACHE_MODES, CacheSpec
from promptlab.engine.spec.runspec import RunSpec
from promptlab.errors import SpecError
from promptlab.prompts.templates import Template
from promptlab.providers.base import CompletionRequest, CompletionResponse, FinishReason
from promptlab.providers.config import EndpointConfig
from promptlab.records import FinalRow, ItemStatus, VariantRecord
from promptlab.records.cache import CacheEntry
from promptlab.store.response_cache import ResponseCacheStore

log = logging.getLogger(__name__)

#: Most entries, and about the most bytes of output, one run holds in memory to answer
#: from (its loaded entries and its own answers): past them, requests are sent.
MAX_INDEX_ENTRIES = 200_000
MAX_INDEX_BYTES = 128 * 2**20
#: Output checks a cached answer must pass to answer an item (no schema passes too).
PASSING = frozenset({CheckStatus.VALID, CheckStatus.REPAIRED, CheckStatus.NO_SCHEMA})


def request_key(endpoint: EndpointConfig, request: CompletionRequest) -> str:
    """The cache key of a request to `endpoint`: see the module docstring for what is
    in it, and what never is."""
    body = {
        "endpoint": endpoint.name,
        "kind": endpoint.kind,
        "base_url": endpoint.base_url or "",
        "model": request.model,
        "messages": [dict(m) for m in request.messages],
        "max_tokens": request.max_tokens,
        # 0 and 0.0 are one temperature.
        "temperature": _number(request.temperature),
        "top_p": _number(request.top_p),
        "seed": request.seed,
        "output_schema": request.output_schema,
        "extra": request.extra,
        "top_logprobs": request.top_logprobs,
        # Repeats of a row are asked to draw again: each is its own request.
        "sample": request.sample,
    }
    text = orjson.dumps(body, default=_plain, option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(text).hexdigest()


def _number(value: float | None) -> float | None:
    return None if value is None else float(value)


def _plain(value: Any) -> Any:
    # Read-only mappings (a template's schema) and tuples of them: orjson takes dicts.
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"not JSON: {type(value).__name__}")


def with_cache_mode(spec: RunSpec, mode: str) -> RunSpec:
    """The spec with its cache mode set (the command line's `--cache`), kept in its
    stored form so a resume uses it too; `any_temperature` stays as the spec says."""
    if mode not in CACHE_MODES:
        raise SpecError(f"--cache: one of {', '.join(CACHE_MODES)}, got {mode!r}")
    cache = replace(spec.cache, mode=mode)
    stored = {"mode": mode, "any_temperature": True} if cache.any_temperature else mode
    return replace(spec, cache=cache, raw={**spec.raw, "cache": stored})


class RunCache:
    """One run's use of the cache: its index, its hits and the answers it puts."""

    def __init__(
        self,
        run_id: str,
        spec: CacheSpec,
        store: ResponseCacheStore,
        writer: BatchWriter,
        clock: Clock,
        checks: tuple[Mapping[int, Template], Mapping[int, Checker]],
    ) -> None:
        self.run_id = run_id
        self.spec = spec
        self.store = store
        self.writer = writer
        self.clock = clock
        self.templates, self.checkers = checks
        self._index: dict[str, CacheEntry] = {}
        self._bytes = 0
        #: Variants whose cached answers failed their checks (said once each).
        self._failed_checks: set[int] = set()

    def eligible(self, request: CompletionRequest) -> bool:
        """A repeatable request (temperature 0, or a seed), or any with `any_temperature`."""
        return self.spec.any_temperature or request.seed is not None or request.temperature == 0

    async def load(self, lanes: Sequence[Lane], variants: Mapping[int, VariantRecord]) -> None:
        """Read what the run can hit, once, off the loop (a store that cannot be read
        leaves the run without: every request is sent)."""
        if not self.spec.reads:
            return
        pairs = {
            (lane.endpoint.name, variants[i].model) for lane in lanes for i in lane.variant_indexes
        }
        try:
            entries = await asyncio.to_thread(
                self.store.load, pairs, MAX_INDEX_ENTRIES, MAX_INDEX_BYTES
            )
        except Exception as exc:  # noqa: BLE001 - a cache that cannot be read is empty
            log.warning("run %s: the response cache could not be read: %s", self.run_id, exc)
            return
        for entry in entries:
            self._add(entry)

    def _add(self, entry: CacheEntry, *, newer: bool = False) -> None:
        """Into the index while it has room; a key it holds keeps its entry unless this
        one is `newer` (the run's own answer to a request whose entry was a miss)."""
        held = self._index.get(entry.cache_key)
        if held is not None and not newer:
            return
        size = entry.size - (held.size if held is not None else 0)
        full = held is None and len(self._index) >= MAX_INDEX_ENTRIES
        if full or self._bytes + size > MAX_INDEX_BYTES:
            return
        self._index[entry.cache_key] = entry
        self._bytes += size

    def hit(
        self, variant: VariantRecord, endpoint: EndpointConfig, request: CompletionRequest
    ) -> tuple[CompletionResponse, OutputCheck | None] | None:
        """The cached answer to this request and its check, when the run reads the
        cache, holds one, and it passes the variant's checks now; else None (send it)."""
        if not self.spec.reads or not self._index or not self.eligible(request):
            return None
        entry = self._index.get(request_key(endpoint, request))
        if entry is None:
            return None
        response = _response(entry)
        passed, check = self._passing(variant, response)
        if not passed:
            return None
        return response, check

    def _passing(
        self, variant: VariantRecord, response: CompletionResponse
    ) -> tuple[bool, OutputCheck | None]:
        """Whether the output passes the variant's checks now (a failed schema or error
        rule is said once per variant), and its check (None: nothing to check)."""
        variant_index = variant.index
        checker = self.checkers.get(variant_index)
        if checker is None:
            return True, None
        check = checker.check(response.text, str(response.finish_reason))
        passed = check.status in PASSING
        rules = self.templates[variant_index].rule_set
        if passed and rules:
            passed = rules.check(check.parsed)[0] is not RuleStatus.FAILED
        if passed:
            return True, check
        if variant_index not in self._failed_checks:
            self._failed_checks.add(variant_index)
            log.warning(
                "run %s: a cached answer no longer passes the output checks of variant %s "
                "(%s): it is a miss, and the request is sent (so for any other like it)",
                self.run_id,
                variant.name,
                check.status,
            )
        return False, check

    def answered(self, endpoint: EndpointConfig, request: CompletionRequest, row: FinalRow) -> None:
        """Keep an item's answer (its final row, output masked as stored) when the run
        writes the cache, the request is eligible and the answer passed its checks."""
        if not self.spec.writes or not self.eligible(request):
            return
        if row.status != ItemStatus.SUCCEEDED or row.output_text is None or row.cache_hit:
            return
        if (row.check_status or CheckStatus.NO_SCHEMA) not in PASSING:
            return
        if row.rule_status == "failed":
            return
        entry = CacheEntry(
            cache_key=request_key(endpoint, request),
            endpoint=endpoint.name,
            model=row.model,
            output_text=row.output_text,
            input_tokens=row.input_tokens,
            output_tokens=row.output_tokens,
            finish_reason=row.finish_reason,
            model_version=row.model_version,
            latency_ms=row.latency_ms,
            token_entropy=row.token_entropy,
            logprob_mean=row.logprob_mean,
            logprob_tokens=row.logprob_tokens,
            source_run_id=self.run_id,
            created_at=self.clock.now(),
        )
        self.writer.cache(entry)
        if self.spec.reads:
            self._add(entry, newer=True)


def _response(entry: CacheEntry) -> CompletionResponse:
    """A cached answer as the recorder takes one in (no headers, no HTTP status)."""
    try:
        finish = FinishReason(entry.finish_reason or "stop")
    except ValueError:
        finish = FinishReason.STOP
    return CompletionResponse(
        text=entry.output_text,
        input_tokens=entry.input_tokens or 0,
        output_tokens=entry.output_tokens or 0,
        finish_reason=finish,
        model_version=entry.model_version or "",
        latency_ms=0.0,
        token_entropy=entry.token_entropy,
        logprob_mean=entry.logprob_mean,
        logprob_tokens=entry.logprob_tokens,
    )
