"""The summary a replayed turn's context shard carries (engine/send/sharding.py asks for it).

Summaries roll forward: the summary carried into shard k is the summary prompt rendered
with `{{ summary }}` (the one carried into shard k-1, empty for the first) and
`{{ conversation }}` (the messages from shard k-1's start to shard k's, as `role: text`
lines: what shard k's context leaves out), sent through the turn's
own lane and limiter, to the turn's model, once per shard however many turns need it.
Each call is an audit event (`shard.summary`, its trace id the shard's id).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from promptlab.audit.chain import AuditDraft, run_chain
from promptlab.engine.record import trace
from promptlab.engine.send.lanes import Lane
from promptlab.engine.send.retry import THROTTLE_KINDS, Action, RetryPolicy, classify
from promptlab.errors import ErrorKind, PromptlabError, ProviderError
from promptlab.prompts.templates import Template
from promptlab.providers.base import CompletionRequest, CompletionResponse
from promptlab.providers.tokens import estimate_prompt_tokens
from promptlab.records import PendingItem, VariantRecord
from promptlab.records.sessions import SESSION_KEY

#: The summary prompt's output when its template sets no max_tokens.
SUMMARY_MAX_TOKENS = 256
SUMMARY_KIND = "shard.summary"
#: What a summary prompt is rendered with.
SUMMARY_VARIABLES = frozenset({"summary", "conversation"})


@dataclass(frozen=True)
class SummaryPrompt:
    """The versioned prompt that summarizes earlier shards, resolved when the run is
    submitted (and pinned to its version id in the spec stored with the run)."""

    version_id: str
    ref: str
    template: Template

    @property
    def max_tokens(self) -> int:
        return int(self.template.params.get("max_tokens") or SUMMARY_MAX_TOKENS)


class SummaryFailed(Exception):
    """The summary a turn's shard carries could not be made; `stops_run` when no call
    could (a quota or auth refusal): the run stops, and its turns stay pending."""

    def __init__(self, message: str, stops_run: bool = False) -> None:
        super().__init__(message)
        self.stops_run = stops_run


@dataclass(frozen=True)
class MadeSummary:
    """One summary call as made: shard k's, the messages sent and the answer (its text
    redacted and masked as stored) with what it cost."""

    shard_id: str
    seq_no: int
    messages: list[dict[str, str]]
    response: CompletionResponse
    cost_usd: float | None


def transcript(messages: Sequence[Mapping[str, str]]) -> str:
    """A shard's messages as `role: text` lines, for the summary prompt."""
    return "\n".join(f"{m['role']}: {m['content']}" for m in messages)


def summary_messages(
    summary: SummaryPrompt, previous: str, left: Sequence[Mapping[str, str]]
) -> list[dict[str, str]]:
    """The summary prompt rendered with the summary carried so far and the messages the
    next shard's context leaves out. Raises SummaryFailed when it does not render."""
    values = {"summary": previous, "conversation": transcript(left)}
    try:
        return summary.template.render(values)
    except PromptlabError as exc:  # the turns fail for want of it, as `no_summary`
        said = f"the summary prompt {summary.ref} did not render: {exc}"
        raise SummaryFailed(said) from exc


async def send_summary(
    lane: Lane,
    policy: RetryPolicy,
    model: str,
    messages: list[dict[str, str]],
    max_tokens: int,
    shard_id: str,
) -> CompletionResponse:
    """One summary call through the lane's limiter, retried like an item's: throttles
    wait at the shared gate, other retryable errors back off; a quota or auth
    refusal stops the run (SummaryFailed.stops_run)."""
    request = CompletionRequest(
        model=model,
        messages=tuple(messages),
        max_tokens=max_tokens,
        request_id=f"{shard_id}-summary",
        timeout_s=policy.timeout_s,
    )
    tokens = estimate_prompt_tokens(messages) + request.max_tokens
    last: ProviderError | None = None
    attempt = throttled = 0
    while attempt - throttled < policy.max_attempts:
        attempt += 1
        permit = await lane.limiter.acquire(tokens)
        used: int | None = None
        try:
            response = await asyncio.wait_for(
                lane.provider.complete(replace(request, attempt=attempt)),
                policy.timeout_s + 1,
            )
            used = response.input_tokens + response.output_tokens
            return response
        except ProviderError as exc:
            last = exc
        except TimeoutError:
            last = ProviderError(ErrorKind.TIMEOUT, f"no answer within {policy.timeout_s:g} s")
        finally:
            lane.limiter.release(permit, used)
        lane.limiter.observe_headers(last.headers)
        action = classify(last)
        if action is Action.STOP_RUN:
            raise SummaryFailed(f"{last.kind.value}: {last.provider_message}", stops_run=True)
        if action is Action.FAIL:
            break
        if last.kind in THROTTLE_KINDS:
            throttled += 1
            lane.limiter.on_throttle(last.retry_after_s, permit.epoch)
            if throttled >= policy.max_throttled_attempts:
                break
            continue
        await asyncio.sleep(policy.delay_s(last, attempt - throttled))
    raise SummaryFailed(str(last) if last is not None else "no answer in time")


def summary_event(
    run_id: str,
    summary: SummaryPrompt,
    item: PendingItem,
    variant: VariantRecord,
    made: MadeSummary,
    now: datetime,
) -> AuditDraft:
    """The audit event of one summary call, on the run's chain."""
    response = made.response
    payload = {
        "shard_id": made.shard_id,
        "session": item.values.get(SESSION_KEY),
        "variant": variant.name,
        "repeat": item.repeat,
        "seq_no": made.seq_no,
        "summarizes": list(range(made.seq_no)),
        "summary_version_id": summary.version_id,
        "prompt_hash": trace.prompt_hash(made.messages),
        "model": variant.model,
        "model_version": response.model_version,
        "input_tokens": response.input_tokens,
        "output_tokens": response.output_tokens,
        "latency_ms": response.latency_ms,
        "cost_usd": made.cost_usd,
        "summary": response.text,
    }
    return AuditDraft(
        run_chain(run_id),
        SUMMARY_KIND,
        f"{made.shard_id}/summary",
        now,
        payload,
        run_id=run_id,
        trace_id=made.shard_id,
    )
