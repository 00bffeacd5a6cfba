"""Lanes: each endpoint's provider and shared limiter, and a run's variants grouped by them.

The engine keeps one provider and one `EndpointLimiter` per endpoint and key for the
life of the process, so every run on an endpoint draws on one budget; a run's own
`limits:` cap only that run, inside the shared limiter.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from promptlab.clock import Clock
from promptlab.engine.send.limiter import EndpointLimiter, Limiter, Limits, RunCappedLimiter
from promptlab.errors import ConfigError
from promptlab.providers.base import Provider
from promptlab.providers.config import EndpointConfig
from promptlab.records import VariantRecord

if TYPE_CHECKING:
    from promptlab.distributed.dispatch import Dispatch
    from promptlab.store.connection import Store

log = logging.getLogger(__name__)

ProviderFactory = Callable[[EndpointConfig], Provider]
#: Lines of provider batches in flight at once per endpoint: each is a waiting task.
MAX_BATCH_WAITING = 100_000


@dataclass(frozen=True)
class Lane:
    """The variants of a run that share one endpoint (and so one limiter)."""

    endpoint: EndpointConfig
    provider: Provider
    limiter: Limiter
    variant_indexes: tuple[int, ...]


@dataclass(frozen=True)
class LiveLane:
    """What the live gateway sends an endpoint's calls with: a provider of its own (its
    connections live on the gateway's loop, where the call is read and answered), and
    the endpoint's shared limiter with the engine loop it belongs to, so live calls and
    runs draw on one budget (promptlab/gateway/sending.py)."""

    endpoint: EndpointConfig
    provider: Provider
    limiter: Limiter
    loop: asyncio.AbstractEventLoop


class EndpointPool:
    """Providers and shared limiters by endpoint + key; used on the engine loop only."""

    def __init__(
        self, provider_factory: ProviderFactory, clock: Clock, store: Store | None = None
    ) -> None:
        self._provider_factory = provider_factory
        self._clock = clock
        #: Where provider batches are written down (`executor: provider-batch`).
        self._store = store
        self._providers: dict[tuple[str, ...], Provider] = {}
        self._limiters: dict[tuple[str, ...], EndpointLimiter] = {}
        #: The link to Celery workers, made when a run first uses an endpoint on them.
        self._dispatch: Dispatch | None = None

    def open(
        self, variants: Sequence[VariantRecord], endpoints: Mapping[str, EndpointConfig]
    ) -> None:
        """Build (or reuse) the provider and shared limiter of each endpoint the run uses."""
        for name in {v.endpoint for v in variants}:
            cfg = endpoints[name]
            key = budget_key(cfg)
            if key not in self._providers:
                self._providers[key] = self._provider(cfg)
            # The shared budget of an endpoint + key is what the providers file (or the
            # server's headers) says; a spec's limits cap only its own run (see `lanes`).
            if key not in self._limiters:
                self._limiters[key] = EndpointLimiter(
                    name, lane_limits(cfg), clock=self._clock.monotonic
                )

    def live(self, cfg: EndpointConfig) -> tuple[Provider, EndpointLimiter]:
        """A provider of its own and the shared limiter of one endpoint, for the live
        gateway. A live call is answered while the caller waits: an endpoint whose calls
        go through workers or a Batch API cannot serve one."""
        if cfg.executor in ("celery", "provider-batch"):
            raise ConfigError(
                f"its calls go through {cfg.executor}; the live gateway calls an endpoint "
                "directly (give it an endpoint without `executor:`)"
            )
        key = budget_key(cfg)
        if key not in self._limiters:
            self._limiters[key] = EndpointLimiter(
                cfg.name, lane_limits(cfg), clock=self._clock.monotonic
            )
        return self._provider_factory(cfg), self._limiters[key]

    def lanes(
        self,
        variants: Sequence[VariantRecord],
        endpoints: Mapping[str, EndpointConfig],
        caps: Mapping[str, Limits],
    ) -> list[Lane]:
        """One lane per endpoint (opened first), so one slow lane blocks no other; each
        limiter is the shared one, inside the run's own cap when `caps` names one."""
        by_endpoint: dict[str, list[int]] = {}
        for variant in variants:
            by_endpoint.setdefault(variant.endpoint, []).append(variant.index)
        lanes = []
        for name, indexes in by_endpoint.items():
            cfg = endpoints[name]
            key = budget_key(cfg)
            shared = self._limiters[key]
            cap = caps.get(cfg.name)
            limiter = shared if cap is None else RunCappedLimiter(shared, cap)
            lanes.append(Lane(cfg, self._providers[key], limiter, tuple(indexes)))
        return lanes

    def _provider(self, cfg: EndpointConfig) -> Provider:
        """This process's adapter, or, for an endpoint on workers, one that sends the
        calls through them (the key stays with the workers: none is read here)."""
        if cfg.executor == "provider-batch":
            return self._batch_provider(cfg)
        if cfg.executor != "celery":
            return self._provider_factory(cfg)
        from promptlab.distributed.dispatch import Dispatch, WorkerProvider

        if self._dispatch is None:
            self._dispatch = Dispatch()
        return WorkerProvider(cfg, self._dispatch)

    def _batch_provider(self, cfg: EndpointConfig) -> Provider:
        """The endpoint's calls sent through its Batch API, its chunks written down in
        the store (providers/batches/)."""
        from promptlab.providers.batches.clients import batch_client_for
        from promptlab.providers.batches.provider import BatchProvider
        from promptlab.store.provider_batches import BatchLedgerStore

        if self._store is None:
            raise ConfigError(f"endpoint {cfg.name!r}: provider batches need the store")
        return BatchProvider(cfg, batch_client_for(cfg), BatchLedgerStore(self._store))

    def chunks_waiting(self) -> dict[str, float] | None:
        """The link to the workers' oldest unanswered chunk per queue (None: no link)."""
        return None if self._dispatch is None else self._dispatch.oldest_waiting()

    async def aclose(self) -> None:
        """Close every provider's client (best effort), and the link to the workers."""
        for provider in self._providers.values():
            try:
                await provider.aclose()
            except Exception:  # noqa: BLE001 - closing is best effort
                log.warning("closing a provider failed", exc_info=True)
        if self._dispatch is not None:
            self._dispatch.close()


def lane_limits(cfg: EndpointConfig) -> Limits:
    """The shared limiter's limits. A provider batch's lines draw on no live rate limit;
    how many of them wait at once is capped, since each is held until its batch ends."""
    if cfg.executor == "provider-batch":
        lines, _ = cfg.batch.limits(cfg.kind)
        return Limits(concurrency=min(MAX_BATCH_WAITING, 4 * lines))
    return Limits(rpm=cfg.rpm, tpm=cfg.tpm, concurrency=cfg.concurrency)


def is_batched(lane: Lane) -> bool:
    """Whether the lane's calls wait for provider batches (minutes to hours each)."""
    return lane.endpoint.executor == "provider-batch"


def budget_key(cfg: EndpointConfig) -> tuple[str, ...]:
    """Endpoint + configuration + key identity: runs on the same endpoint, configured
    alike, with the same key share one budget.

    The whole configuration is part of it: a spec that declares an endpoint under a name
    another spec used, with other limits (or transport, latency...), gets a provider and
    a budget of its own, not the first one's. The key itself is hashed in memory only;
    it is never stored or logged (the configuration holds only the variable's name).
    """
    key = os.environ.get(cfg.api_key_env, "") if cfg.api_key_env else ""
    fingerprint = hashlib.sha256(key.encode()).hexdigest()[:16] if key else ""
    settings = hashlib.sha256(repr(cfg).encode()).hexdigest()[:16]
    return (cfg.name, cfg.kind, cfg.base_url or "", fingerprint, settings)
