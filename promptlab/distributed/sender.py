"""A worker's side of a chunk: claim each ticket, wait for the shared budget, send once,
store the answer and push it to the owner.

One `Sender` per worker process runs an asyncio loop on its own thread; Celery's task
threads hand it chunks. A ticket (an item's attempt) is sent by whoever claims it first
(`SET idempotent:send:{ticket} SENDER NX EX ttl`). A later delivery of the same ticket
(the broker redelivering a killed worker's task, an owner resuming after a crash)
finds the stored answer, or waits for the live claimant's, or, when the claimant's
heartbeat is gone (it was killed mid-send), takes the claim over and sends again: the
only case a provider sees one attempt twice.

A task is acted on only when its MAC verifies and its endpoint resolves from this
worker's own providers file (promptlab/distributed/trust.py); otherwise each of its
tickets is answered with the reason and nothing is sent. Deadlines are this worker's
monotonic clock plus the seconds the owner said were left, and every answer is redacted
(keys, bearer tokens) and sealed (an HMAC over ticket, worker and answer; the owner
takes in nothing else: trust.open_reply) before it is kept in Redis.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Mapping
from typing import Any

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from promptlab.audit.redact import Redactor, watch_env
from promptlab.config import Settings
from promptlab.distributed import settings as keys
from promptlab.distributed.budget import SharedBudget
from promptlab.distributed.claims import ANSWERED, CLAIMED, HELD, ClaimScripts
from promptlab.distributed.fleet import BEAT, ROSTER_KEY
from promptlab.distributed.trust import (
    Refused,
    open_task,
    reply_of,
    resolve_endpoint,
    sealed_answer,
    worker_secret,
)
from promptlab.distributed.wire import (
    answer_to_dict,
    endpoint_to_dict,
    remaining_of,
    request_from_dict,
    run_id_of,
    ticket_of,
)
from promptlab.distributed.worker_metrics import WorkerMetrics, as_ticket, said_chunk
from promptlab.engine.send.retry import THROTTLE_KINDS
from promptlab.errors import ErrorKind, PromptlabError, ProviderError
from promptlab.providers import build_provider, load_endpoints
from promptlab.providers.base import CompletionRequest, CompletionResponse, Provider
from promptlab.providers.config import EndpointConfig
from promptlab.providers.tokens import estimate_prompt_tokens

log = logging.getLogger(__name__)

#: Seconds over a request's own timeout before the sender gives up on a call.
TIMEOUT_GRACE_S = 1.0
#: Seconds one wait for another sender's answer blocks before it looks again.
WAIT_SLICE_S = 2
#: Redis connections one worker process opens at most.
MAX_CONNECTIONS = 256
#: Longest shared back-off one 429's Retry-After sets (the engine caps its own alike).
MAX_BACK_OFF_S = 60.0
#: Answers this process sent that it remembers outside Redis (about 2 KB each): a chunk
#: delivered again after Redis lost its data re-answers them instead of sending again.
REMEMBERED_ANSWERS = 4096
#: Longest pause between two tries to hand an answer to a Redis that went away, and
#: how long it is tried before the chunk fails (and is tried again by Celery).
ANSWER_RETRY_MAX_S = 1.0
ANSWER_HANDOVER_S = 120.0


def _tokens(request: CompletionRequest) -> int:
    """What a send costs a TPM budget: the prompt's estimate and the answer's cap."""
    return estimate_prompt_tokens(request.messages) + request.max_tokens


class Sender:
    """Sends chunks' tickets for one worker process; thread-safe `run_chunk`."""

    def __init__(
        self,
        redis_url: str,
        environ: Mapping[str, str] | None = None,
        *,
        endpoints: Mapping[str, EndpointConfig] | None = None,
        metrics: WorkerMetrics | None = None,
    ) -> None:
        import redis.asyncio

        self.environ = dict(os.environ if environ is None else environ)
        self._secret = worker_secret(redis_url, self.environ)
        #: What this worker sends to: its own providers file, as the engine loads it.
        self.endpoints = dict(
            endpoints
            if endpoints is not None
            else load_endpoints(Settings.from_env(self.environ).providers_file, self.environ)
        )
        watch_env(cfg.api_key_env for cfg in self.endpoints.values())
        #: What its `/metrics` port serves (promptlab/distributed/worker_metrics.py).
        self.metrics = metrics if metrics is not None else WorkerMetrics(set(self.endpoints))
        self._redact = Redactor.from_environ(self.environ)
        self.name = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True, name="sender")
        self._thread.start()
        # Every ticket in flight may hold a connection (a wait for another sender's
        # answer blocks one): a bounded pool that waits for a free one, not an error.
        pool = redis.asyncio.BlockingConnectionPool.from_url(
            redis_url, decode_responses=True, max_connections=MAX_CONNECTIONS, timeout=None
        )
        self.redis = redis.asyncio.Redis(connection_pool=pool)
        # Its own connection: a pool full of waiters must not stop the heartbeat, or
        # other workers would take this one's claims over while it is alive.
        self._beat_redis = redis.asyncio.from_url(redis_url)
        #: Tickets this sender is sending now (its claims that are really live).
        self._sending: set[str] = set()
        #: The last answers this sender sent, by ticket (Redis may lose its copy).
        self._sent_answers: OrderedDict[str, str] = OrderedDict()
        #: Claims, answers and wake-ups, each one atomic call (distributed/claims.py).
        self._scripts = ClaimScripts.register(self.redis)
        self._lanes: dict[str, tuple[Provider, SharedBudget]] = {}
        self._beat = asyncio.run_coroutine_threadsafe(self._heartbeat(), self.loop)

    def run_task(self, args: Any, kwargs: Any) -> dict[str, int]:
        """A task's tickets each answered to its owner (blocks the calling thread); a task
        whose MAC does not verify is refused: logged once, and nothing is sent."""
        received = time.monotonic()  # what the owner's seconds left count from
        try:
            task = open_task(self._secret, args, kwargs)
        except Refused as exc:
            log.error("worker %s refused a task: %s; nothing was sent", self.name, exc)
            self.metrics.tasks.labels("refused").inc()
            asyncio.run_coroutine_threadsafe(self._refuse_unsigned(args, str(exc)), self.loop)
            return {"sent": 0, "reused": 0, "refused": 1}
        self.metrics.tasks.labels("accepted").inc()
        future = asyncio.run_coroutine_threadsafe(
            self._chunk(task.reply_to, task.endpoint, task.requests, received), self.loop
        )
        return future.result()

    def close(self) -> None:
        self._beat.cancel()
        asyncio.run_coroutine_threadsafe(self._aclose(), self.loop).result(timeout=10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)

    async def _aclose(self) -> None:
        await self._beat_redis.delete(keys.heartbeat_key(self.name))
        await self._beat_redis.zrem(ROSTER_KEY, self.name)  # it left: not lost
        for provider, _budget in self._lanes.values():
            await provider.aclose()
        await self.redis.aclose()
        await self._beat_redis.aclose()

    async def _heartbeat(self) -> None:
        while True:
            try:
                await self._beat_redis.set(
                    keys.heartbeat_key(self.name), "1", px=int(keys.HEARTBEAT_TTL_S * 1000)
                )
                await self._beat_redis.eval(BEAT, 1, ROSTER_KEY, self.name)
                self.metrics.heartbeat.set_to_current_time()
            except Exception as exc:  # noqa: BLE001 - Redis away a moment: beat again soon
                log.warning("heartbeat: %s", exc)
            await asyncio.sleep(keys.HEARTBEAT_TTL_S / 3)

    # ---- a chunk -------------------------------------------------------------------

    async def _refuse_unsigned(self, args: Any, reason: str) -> None:
        """Tell the owner a task named, if it can be read, why its tickets got nothing (a
        misconfigured secret then stops its run at once instead of timing out). Only a
        reply is pushed: nothing is stored under a ticket a forger may have chosen."""
        try:
            reply_to, endpoint, requests = args
            tickets = [ticket_of(request_from_dict(r)) for r in requests]
            name = str(endpoint.get("name"))
        except Exception:  # noqa: BLE001 - not a chunk at all: there is no one to tell
            return
        await self._refuse(str(reply_to), name, tickets, f"the task was refused: {reason}")

    async def _refuse(self, reply_to: str, name: str, tickets: list[str], reason: str) -> None:
        error = ProviderError(
            ErrorKind.AUTH,
            f"on worker {self.name}: {reason}; nothing was sent",
            provider=name,
            should_retry=False,
        )
        self.metrics.ticket(name, "refused", len(tickets))
        answer = self._redact.value(answer_to_dict(None, error))
        try:
            await asyncio.gather(
                *(self._answer(reply_to, t, self._seal(t, answer), stored=True) for t in tickets)
            )
        except Exception:  # noqa: BLE001 - Redis away: the owner's timeout takes over
            log.warning("could not tell %s its tickets were refused", reply_to)

    async def _chunk(
        self, reply_to: str, ref: dict[str, Any], requests: list[dict[str, Any]], received: float
    ) -> dict[str, int]:
        """Claim the chunk's tickets in one call and reserve their sends in another; each
        answer is stored and pushed to the owner in one more as soon as it is known."""
        sends = [request_from_dict(r) for r in requests]
        tickets = [ticket_of(r) for r in sends]
        deadlines = [received + remaining_of(r) for r in requests]
        try:
            cfg = resolve_endpoint(ref, self.endpoints)
            provider, budget = self._lane(cfg)
        except (Refused, PromptlabError) as exc:  # no ticket can go: say so to each
            log.error("worker %s refused a chunk: %s", self.name, exc)
            await self._refuse(reply_to, str(ref.get("name")), tickets, str(exc))
            return {"sent": 0, "reused": 0, "refused": len(tickets)}
        states = await self._scripts.claim(
            keys=[
                *(k for t in tickets for k in (keys.answer_key(t), keys.claim_key(t))),
                keys.heartbeat_key(self.name),
            ],
            args=[self.name, keys.ANSWER_TTL_S, int(keys.HEARTBEAT_TTL_S * 1000)],
        )
        for i, state in enumerate(states):
            if state[0] == CLAIMED and tickets[i] in self._sent_answers:
                # Sent here already; Redis lost the answer (restarted empty): keep it again.
                states[i] = [ANSWERED, self._sent_answers[tickets[i]], "restore"]
        mine = [i for i, state in enumerate(states) if state[0] == CLAIMED]
        self._sending.update(tickets[i] for i in mine)
        try:
            waits = await budget.reserve_many([_tokens(sends[i]) for i in mine])
        except BaseException:
            await self._give_back([tickets[i] for i in mine])
            raise
        work: dict[int, Awaitable[bool]] = {
            i: self._send_and_answer(
                reply_to, tickets[i], provider, budget, sends[i], wait, deadlines[i]
            )
            for i, wait in zip(mine, waits, strict=True)
        }
        for i, state in enumerate(states):
            if state[0] == ANSWERED:
                stored = len(state) < 3  # a remembered answer is stored again
                self.metrics.ticket(cfg.name, "reused")
                work[i] = self._answer(reply_to, tickets[i], str(state[1]), stored=stored)
            elif state[0] == HELD:
                work[i] = self._after_holder(reply_to, cfg, sends[i], str(state[1]), deadlines[i])
        runs = [run_id_of(r) for r in requests]
        sent = sum(
            await asyncio.gather(*(as_ticket(w, runs[i], sends[i]) for i, w in work.items()))
        )
        said_chunk(runs, len(sends), sent, cfg.name)
        return {"sent": sent, "reused": len(sends) - sent}

    async def _send_and_answer(
        self,
        reply_to: str,
        ticket: str,
        provider: Provider,
        budget: SharedBudget,
        request: CompletionRequest,
        wait_s: float,
        deadline: float,
    ) -> bool:
        """Send a ticket this sender claimed; a failure on the way gives the claim back
        (the chunk is tried again, and the ticket with it). The answer is kept redacted,
        as the owner's store keeps outputs: Redis is no place for a key a server echoed."""
        try:
            if wait_s > 0:
                await asyncio.sleep(wait_s)
            answer = self._redact.value(await self._send(provider, budget, request, deadline))
            return await self._answer(reply_to, ticket, self._seal(ticket, answer), stored=False)
        except BaseException:
            await self._give_back([ticket])
            raise
        finally:
            self._sending.discard(ticket)

    async def _give_back(self, tickets: list[str]) -> None:
        for ticket in tickets:
            self._sending.discard(ticket)
            try:
                await self._scripts.release(keys=[keys.claim_key(ticket)], args=[self.name])
            except Exception:  # noqa: BLE001 - it expires with its TTL otherwise
                log.warning("could not give back the claim of %s", ticket)

    def _seal(self, ticket: str, answer: dict[str, Any]) -> str:
        return sealed_answer(self._secret, ticket, self.name, answer)

    async def _answer(self, reply_to: str, ticket: str, sealed: str, *, stored: bool) -> bool:
        """Store the sealed answer (unless it is the stored one: that goes as its sender
        sealed it), wake senders waiting on it, and push it to the owner: one script
        call. An answer this sender got is handed over once Redis is back from a moment
        away (the owner sends again only what it never got)."""
        reply = reply_of(ticket, sealed)
        if not stored:
            self._remember(ticket, sealed)
        names = [keys.answer_key(ticket), keys.ready_key(ticket), keys.replies_key(reply_to)]
        ttls = [keys.ANSWER_TTL_S, int(keys.HEARTBEAT_TTL_S * 6)]
        pause, give_up = 0.05, time.monotonic() + ANSWER_HANDOVER_S
        while True:
            try:
                await self._scripts.finish(keys=names, args=[sealed, reply, *ttls, int(stored)])
                return not stored  # True: sent by this sender
            except (OSError, RedisConnectionError, RedisTimeoutError) as exc:
                if time.monotonic() > give_up:
                    raise
                log.warning("could not hand over the answer of %s yet: %s", ticket, exc)
                await asyncio.sleep(pause)
                pause = min(pause * 2, ANSWER_RETRY_MAX_S)

    def _remember(self, ticket: str, answer: str) -> None:
        self._sent_answers[ticket] = answer
        self._sent_answers.move_to_end(ticket)
        while len(self._sent_answers) > REMEMBERED_ANSWERS:
            self._sent_answers.popitem(last=False)

    async def _after_holder(
        self,
        reply_to: str,
        cfg: EndpointConfig,
        request: CompletionRequest,
        holder: str,
        deadline: float,
    ) -> bool:
        """A ticket another sender claimed: its answer once stored, or, when that sender is
        gone (killed mid-send), the claim taken over and the ticket sent again. Waits no
        longer than its owner does."""
        ticket = ticket_of(request)
        claim, ready = keys.claim_key(ticket), keys.ready_key(ticket)
        while True:
            stored = await self.redis.get(keys.answer_key(ticket))
            if stored is not None:
                self.metrics.ticket(cfg.name, "reused")
                return await self._answer(reply_to, ticket, str(stored), stored=True)
            holder = str(await self.redis.get(claim) or "")
            alive = (
                (ticket in self._sending)
                if holder == self.name
                else bool(holder and await self.redis.exists(keys.heartbeat_key(holder)))
            )
            if not alive and await self._scripts.take_over(
                keys=[claim, keys.heartbeat_key(self.name)],
                args=[holder, self.name, keys.ANSWER_TTL_S, int(keys.HEARTBEAT_TTL_S * 1000)],
            ):
                if holder:
                    log.warning(
                        "ticket %s: its sender %s is gone; sending it again", ticket, holder
                    )
                provider, budget = self._lane(cfg)
                self._sending.add(ticket)
                (wait_s,) = await budget.reserve_many([_tokens(request)])
                return await self._send_and_answer(
                    reply_to, ticket, provider, budget, request, wait_s, deadline
                )
            if time.monotonic() > deadline:
                return False  # its owner has given up: it retries as the next attempt
            # Woken by the holder's answer (a short block: the client's socket timeout
            # is 5 s); the next waiter is woken too.
            if await self.redis.blpop([ready], timeout=WAIT_SLICE_S):
                await self._scripts.wake(keys=[ready], args=[int(keys.HEARTBEAT_TTL_S * 6)])

    async def _send(
        self,
        provider: Provider,
        budget: SharedBudget,
        request: CompletionRequest,
        deadline: float,
    ) -> dict[str, Any]:
        """One call to the provider: its answer, or its error, as data, counted on this
        worker's metrics. Nothing is sent once the owner has stopped waiting for it
        (`deadline`, on time.monotonic)."""
        left = deadline - time.monotonic()
        if left <= 0:
            self.metrics.ticket(provider.name, "late")
            late = "not sent: its owner stopped waiting before a worker got to it"
            return answer_to_dict(
                None, ProviderError(ErrorKind.TIMEOUT, late, provider=provider.name)
            )
        endpoint = self.metrics.label(provider.name)
        in_flight = self.metrics.in_flight.labels(endpoint)
        in_flight.inc()
        started = time.monotonic()
        try:
            answer = await self._call(provider, budget, request, min(request.timeout_s, left))
        finally:
            in_flight.dec()
            self.metrics.send_seconds.labels(endpoint).observe(time.monotonic() - started)
        if "response" in answer:
            self.metrics.ticket(provider.name, "sent")
        else:  # its line names the run and item (as_ticket); the owner decides the retry
            self.metrics.ticket(provider.name, "failed")
            error = answer.get("error") or {"kind": "internal"}
            log.info("%s answered %s: %s", provider.name, error["kind"], error.get("message"))
        return answer

    async def _call(
        self, provider: Provider, budget: SharedBudget, request: CompletionRequest, wait_s: float
    ) -> dict[str, Any]:
        """The provider's answer or error as data, waiting at most `wait_s` (and a grace)."""
        try:
            response: CompletionResponse = await asyncio.wait_for(
                provider.complete(request), wait_s + TIMEOUT_GRACE_S
            )
        except ProviderError as exc:
            if exc.kind in THROTTLE_KINDS:
                await budget.back_off(min(exc.retry_after_s or 1.0, MAX_BACK_OFF_S))
            return answer_to_dict(None, exc)
        except TimeoutError:
            error = ProviderError(
                ErrorKind.TIMEOUT,
                f"no answer within {request.timeout_s:g} s",
                provider=provider.name,
            )
            return answer_to_dict(None, error)
        except Exception as exc:  # noqa: BLE001 - an adapter bug: the owner records it
            log.error("a ticket to %s: the adapter failed", provider.name, exc_info=True)
            return {"internal": repr(exc)}
        await budget.learn(response.headers)
        return answer_to_dict(response, None)

    def _lane(self, cfg: EndpointConfig) -> tuple[Provider, SharedBudget]:
        """The provider (its key read from this worker's environment) and budget, for an
        endpoint `resolve_endpoint` gave: this worker's own, or keyless on loopback."""
        key = json.dumps(endpoint_to_dict(cfg), sort_keys=True, default=str)
        if key not in self._lanes:
            api_key = self.environ.get(cfg.api_key_env) if cfg.api_key_env else None
            provider = build_provider(cfg, environ=self.environ)
            self._lanes[key] = (provider, SharedBudget(self.redis, cfg, api_key))
        return self._lanes[key]
