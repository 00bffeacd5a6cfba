"""An item rendered into the request it sends: its variant's template, params and
sampling schedule, its dataset row (or its request line, sent as written), a replayed
turn's conversation, and the context-window preflight.

An item that cannot be sent (its values do not fit the template, its request is over the
model's window) gets its final row here, as invalid input or as the provider error the
preflight raised, and is never dispatched.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from promptlab.conversations.replay import (
    CONVERSATION_KEY,
    TURN_KEY,
    conversation_of,
    generated_history,
    with_conversation,
)
from promptlab.conversations.shards import ShardTooLarge, sharded
from promptlab.data.batchfile import request_from_row
from promptlab.engine.record import trace
from promptlab.engine.record.recorder import ItemRecorder
from promptlab.engine.send.histories import SessionHistories
from promptlab.engine.send.lanes import Lane
from promptlab.engine.send.sharding import Cutters, ShardedTurn, Sharding
from promptlab.engine.spec.runspec import AS_WRITTEN, PARAM_COLUMNS_KEY
from promptlab.errors import ErrorKind, PromptlabError, ProviderError, TemplateError
from promptlab.experiments.sampling import SAMPLING_KEY, Sampling, sampling_from_params
from promptlab.prompts.templates import Template, coerce_text_values, normalize_params
from promptlab.providers import modelrules
from promptlab.providers.base import CompletionRequest
from promptlab.providers.config import sampling_rule
from promptlab.providers.tokens import check_fits, context_window
from promptlab.records import ItemErrorKind, ItemStatus, PendingItem, VariantRecord
from promptlab.records.sessions import SESSION_KEY


@dataclass(frozen=True)
class Prepared:
    request: CompletionRequest
    tokens: int


class RequestBuilder:
    """Renders a run's items into requests (one per run, shared by its lanes)."""

    def __init__(
        self,
        variants: Mapping[int, VariantRecord],
        templates: Mapping[int, Template],
        recorder: ItemRecorder,
        timeout_s: float,
        sharding: Sharding | None = None,
        histories: SessionHistories | None = None,
        *,
        repeats: int,
        positions: int,
        top_logprobs: int | None,
    ) -> None:
        self.variants = variants
        self.templates = templates
        #: Variants whose temperature or top_p moves over the batch.
        self.sampling: dict[int, Sampling] = {
            index: schedule
            for index, v in variants.items()
            if (schedule := sampling_from_params(v.params)) is not None
        }
        self.recorder = recorder
        self.timeout_s = timeout_s
        #: A replay's context shards (engine/send/sharding.py); None for any other run.
        self.sharding = sharding
        #: A replay's logged histories, put together as its turns are sent.
        self.histories = histories
        #: A sampling schedule runs over the dataset: an item's position is its row (and
        #: repeat), so every variant sweeps the same values whatever the others do.
        self.repeats = repeats
        self.positions = positions
        self.top_logprobs = top_logprobs  # asked of every request (a cross-check's entropy)

    @property
    def summarizes(self) -> bool:
        """Whether preparing a replayed turn may wait for a summary to be made."""
        return self.sharding is not None and self.sharding.summary is not None

    def _rendered(
        self, item: PendingItem
    ) -> tuple[Template, dict[str, Any], int, list[dict[str, str]]]:
        """The item's template, params (its row's and its sampling step's), max_tokens
        and the version's messages rendered with its row (raises PromptlabError)."""
        variant = self.variants[item.variant_index]
        template = self.templates[item.variant_index]
        params = dict(row_params(variant.params, item.values))
        sampling = self.sampling.get(item.variant_index)
        if sampling is not None:
            position = item.row_index * self.repeats + item.repeat
            moved = sampling.apply(params, position, self.positions)
            params = {k: v for k, v in moved.items() if k != SAMPLING_KEY}
        values = coerce_text_values(template, dict(item.values))
        return template, params, int(params.get("max_tokens") or 256), template.render(values)

    async def prepare(
        self, item: PendingItem, lane: Lane, answers: list[str] | None = None
    ) -> Prepared | None:
        """Render the request; an item that cannot be sent gets its final row now. A
        replayed turn with generated history is sent with the model's `answers` to the
        turns before it in place of the logged ones; one whose history does not fit the
        window, with its own shard of it, after the summary the shard carries (made
        first if need be: engine/send/sharding.py; SummaryFailed when it cannot be)."""
        variant = self.variants[item.variant_index]
        if variant.template.get(AS_WRITTEN):
            return self.prepare_as_written(item, lane, variant)
        conversation, cutters = await self._conversation(item, answers)
        try:
            template, params, max_tokens, rendered = self._rendered(item)
            turn = self._plan(item, lane, variant, rendered, conversation, max_tokens, cutters)
            shard = None
            if turn is not None:
                assert self.sharding is not None
                summary = await self.sharding.summary_for(item, lane, variant, turn)
                shard = self._shard_stage(item, variant, turn, summary)
                # Its own shard runs to the turn, the history's end.
                conversation = sharded(conversation, turn.own.start, None, summary)
            messages = with_conversation(rendered, {CONVERSATION_KEY: conversation})
            stage = trace.render_stage(item.values, messages, answers, shard)
            tokens = self._preflight(item, lane, variant.model, messages, max_tokens, stage)
        except ProviderError as exc:
            self.recorder.final(item, ItemStatus.FAILED, False, error=(exc.kind.value, str(exc)))
            return None
        except PromptlabError as exc:
            self.recorder.final(
                item, ItemStatus.FAILED, False, error=(ItemErrorKind.INVALID_INPUT, str(exc))
            )
            return None
        # The model's rule (checked at submit): a template default it does not take is
        # not sent (claude-sonnet-4-5 answers 400 to temperature and top_p together).
        temperature, top_p = modelrules.sent(
            sampling_rule(lane.endpoint, variant.model),
            params.get("temperature"),
            params.get("top_p"),
        )
        request = CompletionRequest(
            model=variant.model,
            messages=tuple(messages),
            max_tokens=max_tokens,
            temperature=temperature,
            top_p=top_p,
            # Only providers that take a schema are sent one (the output is checked here).
            output_schema=(template.output_schema if lane.provider.supports_json_schema else None),
            request_id=item.key,
            item_key=item.key,
            run_id=self.recorder.run_id,
            timeout_s=self.timeout_s,
            top_logprobs=self.top_logprobs,
            # Which repeat of its row: the simulated model's repeats differ at
            # temperature > 0 (a run without repeats is sent as it always was).
            sample=item.repeat if self.repeats > 1 else None,
        )
        if params is not variant.params:
            self.recorder.row_params[item.key] = params
        return Prepared(request, tokens + max_tokens)

    async def _conversation(
        self, item: PendingItem, answers: list[str] | None
    ) -> tuple[Sequence[dict[str, str]], Cutters | None]:
        """The conversation before a replayed turn (empty for any other row), and, for a
        logged one, its session's context-shard cutters. Built now, from the session's
        rows (engine/send/histories.py), or read from a row that holds it (a replay planned
        before rows held only their part)."""
        logged = await self.histories.history(item) if self.histories is not None else None
        if logged is None:
            return conversation_of(item.values, answers), None
        if answers is not None:
            history = logged.history
            return (generated_history(history, answers) if history else []), None
        return logged.history, logged.cutters

    def _preflight(
        self,
        item: PendingItem,
        lane: Lane,
        model: str,
        messages: Sequence[Mapping[str, str]],
        max_tokens: int,
        stage: dict[str, Any],
    ) -> int:
        """The prompt's tokens, or CONTEXT_LENGTH raised when it is over the window; the
        render `stage` and the preflight's kept for the item's trace."""
        if self.recorder.audit:
            self.recorder.traces[item.key] = stage
        tokens = check_fits(lane.endpoint, model, messages, max_tokens)
        if self.recorder.audit:
            self.recorder.traces[item.key] |= trace.preflight_stage(
                tokens, max_tokens, context_window(lane.endpoint, model)
            )
        return tokens

    def _plan(
        self,
        item: PendingItem,
        lane: Lane,
        variant: VariantRecord,
        rendered: list[dict[str, str]],
        conversation: Sequence[dict[str, str]],
        max_tokens: int,
        cutters: Cutters | None = None,
    ) -> ShardedTurn | None:
        """A replayed turn's shards, or None when its history fits whole (or it is no
        replayed turn); a turn no shard can hold raises CONTEXT_LENGTH, naming it."""
        if self.sharding is None or not conversation:
            return None
        try:
            return self.sharding.plan(
                lane,
                variant.model,
                rendered,
                conversation,
                max_tokens,
                item.values.get(TURN_KEY),
                cutters,
            )
        except ShardTooLarge as exc:
            raise ProviderError(
                ErrorKind.CONTEXT_LENGTH,
                f"session {item.values.get(SESSION_KEY)}: {exc}, with max_tokens {max_tokens} "
                f"and the version's messages in the {context_window(lane.endpoint, variant.model)}"
                f"-token window of {lane.endpoint.name}:{variant.model} (not sent)",
                provider=lane.endpoint.name,
            ) from exc

    def _shard_stage(
        self, item: PendingItem, variant: VariantRecord, turn: ShardedTurn, summary: str | None
    ) -> dict[str, Any]:
        """The turn's own shard as its render stage keeps it, noted in the store and on
        its result row."""
        assert self.sharding is not None
        own = turn.own
        shard_id = self.sharding.note(item, variant, turn)
        self.recorder.row_shards[item.key] = shard_id
        stage = {
            "id": shard_id,
            "seq_no": own.seq_no,
            "first_message": own.start,
            "last_message": own.end - 1,
            "cut": own.cut,
        }
        return stage | ({"summary": summary} if summary is not None else {})

    def prepare_as_written(
        self, item: PendingItem, lane: Lane, variant: VariantRecord
    ) -> Prepared | None:
        """A request line sent as it is: its messages, its params, its id as request id."""
        try:
            line = request_from_row(item.values, str(variant.template.get("id_field")))
            max_tokens = int(line.params["max_tokens"])
            stage = trace.render_stage(item.values, line.messages)
            tokens = self._preflight(item, lane, variant.model, line.messages, max_tokens, stage)
        except ProviderError as exc:
            self.recorder.final(item, ItemStatus.FAILED, False, error=(exc.kind.value, str(exc)))
            return None
        except PromptlabError as exc:
            error = (ItemErrorKind.INVALID_INPUT, str(exc))
            self.recorder.final(item, ItemStatus.FAILED, False, error=error)
            return None
        self.recorder.row_params[item.key] = line.params
        request = CompletionRequest(
            model=variant.model,
            messages=line.messages,
            max_tokens=max_tokens,
            temperature=line.params.get("temperature"),
            top_p=line.params.get("top_p"),
            seed=line.params.get("seed"),
            extra=line.extra or None,
            request_id=line.custom_id,
            item_key=item.key,
            run_id=self.recorder.run_id,
            timeout_s=self.timeout_s,
        )
        return Prepared(request, tokens + max_tokens)


def row_params(params: Mapping[str, Any], row: Mapping[str, Any]) -> Mapping[str, Any]:
    """The variant's params with those it reads from dataset columns filled in for `row`.

    A blank cell keeps the variant's own value; a value of the wrong type or range
    raises TemplateError naming the column (the item fails as invalid input).
    """
    columns = params.get(PARAM_COLUMNS_KEY)
    if not columns:
        return params
    out = {k: v for k, v in params.items() if k != PARAM_COLUMNS_KEY}
    for param, column in columns.items():
        raw = row.get(column)
        if raw is None or (isinstance(raw, str) and not raw.strip()):
            continue
        try:
            value: Any = int(raw) if param == "max_tokens" else float(raw)
            normalize_params({"model": "check:only", param: value})
        except (TypeError, ValueError, TemplateError) as exc:
            raise TemplateError(
                f"column {column!r} ({param}): {raw!r} is not valid: {exc}"
            ) from exc
        out[param] = value
    return out
