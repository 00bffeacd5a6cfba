"""One run's execution on the engine loop: stream items, dispatch, retry, record."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from promptlab.audit.chain import AuditDraft, Masker, attempt_values, row_digest, run_chain
from promptlab.checks.anomalies import RunDetector, observation_of, schema_fields
from promptlab.checks.validation import Checker, CheckStatus, OutputCheck, checker_for
from promptlab.clock import SYSTEM_CLOCK, Clock
from promptlab.data.batchfile import request_from_row
from promptlab.engine import trace
from promptlab.engine.limiter import Limiter, Permit
from promptlab.engine.progress import Counters
from promptlab.engine.retry import THROTTLE_KINDS, Action, RetryPolicy, classify
from promptlab.engine.spec import AS_WRITTEN, PARAM_COLUMNS_KEY
from promptlab.engine.writer import BatchWriter
from promptlab.errors import ErrorKind, PromptlabError, ProviderError, TemplateError
from promptlab.experiments.sampling import SAMPLING_KEY, Sampling, sampling_from_params
from promptlab.prompts.templates import Template, coerce_text_values, normalize_params
from promptlab.providers.base import CompletionRequest, CompletionResponse, Provider
from promptlab.providers.config import EndpointConfig, cost_usd
from promptlab.providers.tokens import check_fits, context_window
from promptlab.records import (
    AlertRecord,
    AttemptRow,
    FinalRow,
    ItemErrorKind,
    ItemStatus,
    PendingItem,
    VariantRecord,
)
from promptlab.store.items import ItemStore

log = logging.getLogger(__name__)

#: Items read from the store per query; two chunks per endpoint are in memory at most.
CHUNK_SIZE = 1_000
#: Extra seconds over the policy timeout before the engine itself gives up on a call.
TIMEOUT_GRACE_S = 1.0
WAIT_BACKOFF = "backoff"
#: Longest error message kept on an attempt or result.
MAX_MESSAGE_CHARS = 2_000
#: Internal errors in a row (no success between them) that stop the run: an adapter
#: bug fails every item alike, and a run of them must not "complete" quietly.
INTERNAL_STOP_AFTER = 3


@dataclass(frozen=True)
class Lane:
    """The variants of a run that share one endpoint (and so one limiter)."""

    endpoint: EndpointConfig
    provider: Provider
    limiter: Limiter
    variant_indexes: tuple[int, ...]


@dataclass(frozen=True)
class Prepared:
    request: CompletionRequest
    tokens: int


class RunExecution:
    """Drives one run to its end; `cancel` and `stop` may be called from the loop."""

    def __init__(
        self,
        run_id: str,
        variants: Sequence[VariantRecord],
        lanes: Sequence[Lane],
        policy: RetryPolicy,
        items: ItemStore,
        writer: BatchWriter,
        counters: Counters,
        clock: Clock = SYSTEM_CLOCK,
        *,
        repeats: int = 1,
        rows: int | None = None,
        alert_sink: Callable[[list[AlertRecord]], None] | None = None,
        reask: int = 0,
        audit: bool = True,
        masker: Masker | None = None,
    ) -> None:
        self.run_id = run_id
        self.clock = clock
        #: A sampling schedule runs over the dataset: an item's position is its row (and
        #: repeat), so every variant sweeps the same values whatever the others do.
        self.repeats = repeats
        self.positions = (rows if rows is not None else counters.total) * repeats
        self.variants = {v.index: v for v in variants}
        self.templates = {
            v.index: Template.from_canonical(v.template)
            for v in variants
            if not v.template.get(AS_WRITTEN)
        }
        #: Compiled output checks of variants whose template has an output schema or
        #: rules (rules need the output parsed: with no schema, any JSON fits).
        self.checkers: dict[int, Checker] = {
            index: checker_for(template.output_schema or {})
            for index, template in self.templates.items()
            if template.output_schema is not None or template.rules
        }
        #: Variants whose temperature or top_p moves over the batch.
        self.sampling: dict[int, Sampling] = {
            v.index: sampling
            for v in variants
            if (sampling := sampling_from_params(v.params)) is not None
        }
        self.lanes = list(lanes)
        self.lane_of = {i: lane for lane in lanes for i in lane.variant_indexes}
        self.policy = policy
        self.items = items
        self.writer = writer
        self.counters = counters
        self.stopping = asyncio.Event()
        self.cancelled = False
        self.stop_reason: str | None = None
        self._feeders: list[asyncio.Task[None]] = []
        self._items: set[asyncio.Task[None]] = set()
        #: Adapter bugs in a row, per endpoint: one broken adapter stops the run even
        #: while another endpoint's answers keep coming.
        self._internal_streak: dict[str, int] = {}
        #: Params of items whose variant reads some from dataset columns, until final.
        self._row_params: dict[str, Mapping[str, Any]] = {}
        #: Anomaly detectors fed each final row as it is recorded (O(1) per item); what
        #: they raise goes to `alert_sink` (the engine stores it off the loop).
        self.detector = RunDetector(
            run_id,
            {
                self.variants[index].name: schema_fields(template.output_schema)
                for index, template in self.templates.items()
            },
            now=clock.now,
        )
        self.alert_sink = alert_sink
        #: Follow-up turns per item for an output that failed its check (not truncated).
        self.reask = reask
        #: Trace events go to the writer with the rows they describe (promptlab.audit.chain).
        self.audit = audit
        self.chain = run_chain(run_id)
        self.masker = masker if masker else None
        #: Render and preflight stages of items in flight, until their final row (flat
        #: dicts of strings and numbers: see trace.result_payload).
        self._traces: dict[str, dict[str, Any]] = {}

    # ---- control -------------------------------------------------------------------

    def cancel(self) -> None:
        """Stop new dispatches now; in-flight requests finish or time out."""
        self.cancelled = True
        self._halt()

    def stop(self, reason: str) -> None:
        """Stop the run because of an error no item can get past (quota, auth)."""
        if self.stop_reason is None:
            self.stop_reason = reason
        self._halt()

    def _halt(self) -> None:
        self.stopping.set()
        for task in self._feeders:
            task.cancel()

    # ---- the run -------------------------------------------------------------------

    async def execute(self) -> None:
        """Feed every lane, wait for the last item, flush; the caller sets the final status."""
        self._feeders = [
            asyncio.create_task(self._feed(lane), name=f"feed-{self.run_id}-{lane.endpoint.name}")
            for lane in self.lanes
        ]
        if self.stopping.is_set():
            self._halt()
        results = await asyncio.gather(*self._feeders, return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException) and not isinstance(result, asyncio.CancelledError):
                self.stop(f"internal error: {result!r}")
                log.error("feeder failed", exc_info=result)
        while self._items:
            await asyncio.gather(*list(self._items), return_exceptions=True)
        # False when the store cannot write: the caller records the end as it can.
        await self.writer.flush()

    async def _feed(self, lane: Lane) -> None:
        after = -1
        next_chunk = asyncio.create_task(self._read(after, lane))
        try:
            while not self.stopping.is_set():
                chunk = await next_chunk
                if not chunk:
                    return
                after = chunk[-1].seq
                # Read the next chunk while this one is dispatched.
                next_chunk = asyncio.create_task(self._read(after, lane))
                for item in chunk:
                    if self.stopping.is_set():
                        return
                    # Backpressure: while the store cannot write, nothing new is sent;
                    # once it has given up, the run stops with the store's message.
                    gave_up = await self.writer.wait_writable()
                    if gave_up is not None:
                        self.stop(f"store: {gave_up}")
                        return
                    prepared = self._prepare(item, lane)
                    if prepared is None:
                        continue
                    permit = await lane.limiter.acquire(prepared.tokens)
                    task = asyncio.create_task(self._run_item(item, lane, prepared, permit))
                    self._items.add(task)
                    task.add_done_callback(self._items.discard)
        finally:
            next_chunk.cancel()

    async def _read(self, after: int, lane: Lane) -> list[PendingItem]:
        return await asyncio.to_thread(
            self.items.pending_chunk, self.run_id, after, lane.variant_indexes, CHUNK_SIZE
        )

    def _prepare(self, item: PendingItem, lane: Lane) -> Prepared | None:
        """Render the request; an item that cannot be sent gets its final row now."""
        variant = self.variants[item.variant_index]
        if variant.template.get(AS_WRITTEN):
            return self._prepare_as_written(item, lane, variant)
        template = self.templates[item.variant_index]
        try:
            params = row_params(variant.params, item.values)
            sampling = self.sampling.get(item.variant_index)
            if sampling is not None:
                position = item.row_index * self.repeats + item.repeat
                moved = sampling.apply(params, position, self.positions)
                params = {k: v for k, v in moved.items() if k != SAMPLING_KEY}
            max_tokens = int(params.get("max_tokens") or 256)
            values = coerce_text_values(template, {k: v for k, v in item.values.items()})
            messages = template.render(values)
            if self.audit:
                self._traces[item.key] = trace.render_stage(item.values, messages)
            tokens = check_fits(lane.endpoint, variant.model, messages, max_tokens)
            if self.audit:
                self._traces[item.key] |= trace.preflight_stage(
                    tokens, max_tokens, context_window(lane.endpoint, variant.model)
                )
        except ProviderError as exc:
            self._final(item, ItemStatus.FAILED, False, error=(exc.kind.value, str(exc)))
            return None
        except PromptlabError as exc:
            self._final(
                item, ItemStatus.FAILED, False, error=(ItemErrorKind.INVALID_INPUT, str(exc))
            )
            return None
        request = CompletionRequest(
            model=variant.model,
            messages=tuple(messages),
            max_tokens=max_tokens,
            temperature=params.get("temperature"),
            top_p=params.get("top_p"),
            # Only providers that can be held to a schema are sent one; the output is
            # checked on our side either way.
            output_schema=(template.output_schema if lane.provider.supports_json_schema else None),
            request_id=item.key,
            timeout_s=self.policy.timeout_s,
        )
        if params is not variant.params:
            self._row_params[item.key] = params
        return Prepared(request, tokens + max_tokens)

    def _prepare_as_written(
        self, item: PendingItem, lane: Lane, variant: VariantRecord
    ) -> Prepared | None:
        """A request line sent as it is: its messages, its params, its id as request id."""
        try:
            line = request_from_row(item.values, str(variant.template.get("id_field")))
            max_tokens = int(line.params["max_tokens"])
            if self.audit:
                self._traces[item.key] = trace.render_stage(item.values, line.messages)
            tokens = check_fits(lane.endpoint, variant.model, list(line.messages), max_tokens)
            if self.audit:
                self._traces[item.key] |= trace.preflight_stage(
                    tokens, max_tokens, context_window(lane.endpoint, variant.model)
                )
        except ProviderError as exc:
            self._final(item, ItemStatus.FAILED, False, error=(exc.kind.value, str(exc)))
            return None
        except PromptlabError as exc:
            error = (ItemErrorKind.INVALID_INPUT, str(exc))
            self._final(item, ItemStatus.FAILED, False, error=error)
            return None
        self._row_params[item.key] = line.params
        request = CompletionRequest(
            model=variant.model,
            messages=line.messages,
            max_tokens=max_tokens,
            temperature=line.params.get("temperature"),
            top_p=line.params.get("top_p"),
            seed=line.params.get("seed"),
            request_id=line.custom_id,
            timeout_s=self.policy.timeout_s,
        )
        return Prepared(request, tokens + max_tokens)

    async def _run_item(
        self, item: PendingItem, lane: Lane, prepared: Prepared, permit: Permit
    ) -> None:
        attempt = item.attempts
        wait_s, wait_reason = permit.waited_s, permit.wait_reason
        self.writer.dispatched(item.key)
        self.counters.dispatched()
        last_error: ProviderError | None = None
        throttled = 0
        while True:
            attempt += 1
            started_at = self.clock.now()
            t0 = self.clock.monotonic()
            response: CompletionResponse | None = None
            error: ProviderError | None = None
            try:
                response = await asyncio.wait_for(
                    lane.provider.complete(prepared.request),
                    self.policy.timeout_s + TIMEOUT_GRACE_S,
                )
            except ProviderError as exc:
                error = exc
            except TimeoutError:
                error = ProviderError(
                    ErrorKind.TIMEOUT,
                    f"no answer within {self.policy.timeout_s:g} s",
                    provider=lane.endpoint.name,
                )
            except Exception as exc:  # noqa: BLE001 - an adapter bug must not kill the run
                lane.limiter.release(permit, None)
                self._attempt(item, attempt, started_at, t0, None, None, wait_s, wait_reason)
                self._final(
                    item,
                    ItemStatus.FAILED,
                    True,
                    attempt,
                    error=(ItemErrorKind.INTERNAL, repr(exc)),
                )
                self._internal_error(lane, exc)
                return
            if response is not None:
                self._internal_streak[lane.endpoint.name] = 0
                lane.limiter.release(permit, response.input_tokens + response.output_tokens)
                lane.limiter.observe_headers(response.headers)
                self._attempt(item, attempt, started_at, t0, response, None, wait_s, wait_reason)
                check = None
                if self.reask and item.variant_index in self.checkers:
                    response, check, attempt = await self._reask(
                        item, lane, prepared, response, attempt
                    )
                self._final(
                    item, ItemStatus.SUCCEEDED, True, attempt,
                    response=response, lane=lane, check=check,
                )  # fmt: skip
                return
            assert error is not None
            last_error = error
            lane.limiter.release(permit, None)
            lane.limiter.observe_headers(error.headers)
            self._attempt(item, attempt, started_at, t0, None, error, wait_s, wait_reason)
            action = classify(error)
            if error.kind in THROTTLE_KINDS:
                hint = error.retry_after_s
                capped = min(hint, self.policy.max_retry_after_s) if hint is not None else None
                lane.limiter.on_throttle(capped, permit.epoch)
            if action is Action.STOP_RUN:
                self.stop(f"{error.kind.value}: {error.provider_message}")
                self._final(item, ItemStatus.FAILED, True, attempt, error=_describe(error))
                return
            if error.kind in THROTTLE_KINDS:
                throttled += 1
            # Throttles are the limiter's business: they only end an item in large numbers.
            counted = attempt - item.attempts - throttled
            if (
                action is Action.FAIL
                or counted >= self.policy.max_attempts
                or throttled >= self.policy.max_throttled_attempts
            ):
                self._final(item, ItemStatus.FAILED, True, attempt, error=_describe(error))
                return
            # Throttles wait at the shared gate; other errors back off on their own.
            delay = 0.0 if error.kind in THROTTLE_KINDS else self.policy.delay_s(error, attempt)
            if delay > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.stopping.wait(), delay)
            if self.stopping.is_set():
                self._cancel_after_error(item, attempt, last_error)
                return
            acquire = asyncio.ensure_future(lane.limiter.acquire(prepared.tokens))
            stop_wait = asyncio.ensure_future(self.stopping.wait())
            await asyncio.wait({acquire, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
            stop_wait.cancel()
            if not acquire.done():
                acquire.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await acquire
            if acquire.cancelled() or acquire.exception() is not None:
                self._cancel_after_error(item, attempt, last_error)
                return
            permit = acquire.result()
            if self.stopping.is_set():
                lane.limiter.release(permit, 0)
                self._cancel_after_error(item, attempt, last_error)
                return
            wait_s = delay + permit.waited_s
            wait_reason = WAIT_BACKOFF if delay > 0 else permit.wait_reason

    async def _reask(
        self,
        item: PendingItem,
        lane: Lane,
        prepared: Prepared,
        response: CompletionResponse,
        attempt: int,
    ) -> tuple[CompletionResponse, OutputCheck, int]:
        """While the output is invalid (not truncated) and re-asks are left, send the
        conversation back with the answer and its errors; each turn is its own attempt.

        Re-asks have their own budget: transport errors of a re-ask are not retried, and
        then the last answer stands as the result.
        """
        checker = self.checkers[item.variant_index]
        check = checker.check(response.text, str(response.finish_reason))
        for _ in range(self.reask):
            if check.status is not CheckStatus.INVALID or self.stopping.is_set():
                break
            request = replace(
                prepared.request,
                messages=(
                    *prepared.request.messages,
                    {"role": "assistant", "content": response.text},
                    {"role": "user", "content": reask_message(check.errors)},
                ),
            )
            # Rough: the answer and the errors added to what the first request held.
            tokens = (
                prepared.tokens + (len(response.text) + len(request.messages[-1]["content"])) // 3
            )
            permit = await lane.limiter.acquire(tokens)
            attempt += 1
            started_at, t0 = self.clock.now(), self.clock.monotonic()
            answer: CompletionResponse | None = None
            error: ProviderError | None = None
            try:
                answer = await asyncio.wait_for(
                    lane.provider.complete(request), self.policy.timeout_s + TIMEOUT_GRACE_S
                )
            except ProviderError as exc:
                error = exc
            except TimeoutError:
                error = ProviderError(
                    ErrorKind.TIMEOUT,
                    f"no answer within {self.policy.timeout_s:g} s",
                    provider=lane.endpoint.name,
                )
            except Exception:  # noqa: BLE001 - an adapter bug ends the re-asks, not the item
                log.warning("run %s: a re-ask failed", self.run_id, exc_info=True)
            waited = permit.waited_s, permit.wait_reason
            if answer is None:
                lane.limiter.release(permit, None)
                if error is not None:
                    lane.limiter.observe_headers(error.headers)
                self._attempt(item, attempt, started_at, t0, None, error, *waited, reask=True)
                break
            lane.limiter.release(permit, answer.input_tokens + answer.output_tokens)
            lane.limiter.observe_headers(answer.headers)
            self._attempt(item, attempt, started_at, t0, answer, None, *waited, reask=True)
            response = answer
            check = checker.check(response.text, str(response.finish_reason))
        return response, check, attempt

    def _internal_error(self, lane: Lane, exc: Exception) -> None:
        """Count an adapter bug; log its traceback once, stop the run when it repeats."""
        streak = self._internal_streak.get(lane.endpoint.name, 0) + 1
        self._internal_streak[lane.endpoint.name] = streak
        if streak == 1:
            log.error(
                "run %s: the %s adapter raised", self.run_id, lane.endpoint.name, exc_info=exc
            )
        if streak >= INTERNAL_STOP_AFTER and self.stop_reason is None:
            self.stop(
                f"{ItemErrorKind.INTERNAL}: the {lane.endpoint.name} adapter failed "
                f"{streak} items in a row with {exc!r}"
            )

    def _cancel_after_error(self, item: PendingItem, attempt: int, error: ProviderError) -> None:
        message = f"cancelled before a retry; last error {error}"
        self._final(item, ItemStatus.CANCELLED, True, attempt, error=(None, message))

    # ---- records -------------------------------------------------------------------

    def _attempt(
        self,
        item: PendingItem,
        attempt: int,
        started_at: Any,
        t0: float,
        response: CompletionResponse | None,
        error: ProviderError | None,
        wait_s: float,
        wait_reason: str | None,
        *,
        reask: bool = False,
    ) -> None:
        elapsed_ms = (self.clock.monotonic() - t0) * 1000
        row = AttemptRow(
                key=item.key,
                run_id=self.run_id,
                attempt=attempt,
                started_at=started_at,
                ended_at=self.clock.now(),
                outcome="ok" if response is not None else "error",
                error_kind=(error.kind.value if error else ItemErrorKind.INTERNAL)
                if response is None
                else None,
                http_status=error.status if error else None,
                error_message=str(error)[:MAX_MESSAGE_CHARS] if error else None,
                wait_ms=wait_s * 1000,
                wait_reason=wait_reason,
                retry_after_s=error.retry_after_s if error else None,
                latency_ms=response.latency_ms if response is not None else elapsed_ms,
                reask=reask,
        )  # fmt: skip
        self.writer.attempt(row)
        # A failed or re-asked attempt gets its own event; the answered one is read back
        # from `attempts` by the trace view (the result event covers its results row).
        answered = response is not None and not (self.reask and item.variant_index in self.checkers)
        if self.audit and answered:
            stages = self._traces.get(item.key)
            if stages is not None:  # the result event will hold the row's hash
                stages["attempt_sha256"] = row_digest(attempt_values(row))
        if self.audit and not answered:
            payload = trace.attempt_payload(row, response)
            draft = AuditDraft(self.chain, "attempt", f"{item.key}/a{attempt}", row.ended_at,
                               payload, run_id=self.run_id, trace_id=item.key)  # fmt: skip
            self.writer.audit(draft)

    def _masking(self, masked: Mapping[str, int]) -> dict[str, int] | None:
        """What the masking masked in the output, every pattern named (0 included): the
        trace view masks the prompt it renders again with the same patterns."""
        if self.masker is None:
            return None
        return {name: masked.get(name, 0) for name in self.masker.names}

    def _final(
        self,
        item: PendingItem,
        status: str,
        was_in_flight: bool,
        attempts: int | None = None,
        *,
        error: tuple[str | None, str] | None = None,
        response: CompletionResponse | None = None,
        lane: Lane | None = None,
        check: OutputCheck | None = None,
    ) -> None:
        variant = self.variants[item.variant_index]
        usage: dict[str, Any] = {}
        parsed: Any = None
        stages = self._traces.pop(item.key, None) if self.audit else None
        masked: dict[str, int] = {}
        if response is not None and lane is not None:
            checked, parsed = self._check(item.variant_index, response, check)
            text = response.text
            if self.masker is not None:
                # Checked as answered; stored (results and trace) with the patterns masked.
                text = self.masker.mask(text, masked)
            usage = {
                "output_text": text,
                "input_tokens": response.input_tokens,
                "output_tokens": response.output_tokens,
                "finish_reason": str(response.finish_reason),
                "model_version": response.model_version,
                "latency_ms": response.latency_ms,
                "cost_usd": cost_usd(
                    lane.endpoint, variant.model, response.input_tokens, response.output_tokens
                ),
                **checked,
            }
        row = FinalRow(
            key=item.key,
            run_id=self.run_id,
            seq=item.seq,
            row_index=item.row_index,
            variant=variant.name,
            repeat=item.repeat,
            status=status,
            prompt_version_id=variant.prompt_version_id,
            endpoint=variant.endpoint,
            model=variant.model,
            params=self._row_params.pop(item.key, variant.params),
            attempts=item.attempts if attempts is None else attempts,
            finished_at=self.clock.now(),
            error_kind=error[0] if error else None,
            error_message=error[1][:MAX_MESSAGE_CHARS] if error else None,
            **usage,
        )
        self.writer.final(row)
        if self.audit:
            self.writer.audit(
                AuditDraft(
                    self.chain,
                    "result",
                    f"{item.key}/final/{row.attempts}",
                    row.finished_at,
                    trace.result_payload(row, stages, self._masking(masked)),
                    run_id=self.run_id,
                    trace_id=item.key,
                )  # fmt: skip
            )
        self.counters.finished(status, was_in_flight)
        if status != ItemStatus.CANCELLED:
            self._detect(row, parsed)

    def _detect(self, row: FinalRow, parsed: Any) -> None:
        obs = observation_of(
            row.seq, row.variant, row.status, row.error_kind, row.check_status,
            row.output_text, parsed,
        )  # fmt: skip
        alerts = self.detector.observe(obs)
        if alerts and self.alert_sink is not None:
            self.alert_sink(alerts)

    def _check(
        self, variant_index: int, response: CompletionResponse, done: OutputCheck | None = None
    ) -> tuple[dict[str, Any], Any]:
        """The output check's status and errors, as FinalRow fields (compiled validator),
        and the JSON value found in the output (None when there is no check)."""
        checker = self.checkers.get(variant_index)
        if checker is None:
            return {"check_status": CheckStatus.NO_SCHEMA.value}, None
        check = done or checker.check(response.text, str(response.finish_reason))
        fields: dict[str, Any] = {"check_status": check.status.value, "check_errors": check.errors}
        rules = self.templates[variant_index].rule_set
        if rules and check.status in (CheckStatus.VALID, CheckStatus.REPAIRED):
            status, failed = rules.check(check.parsed)
            fields |= {"rule_status": status.value, "rule_errors": tuple(map(str, failed))}
        return fields, check.parsed


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


#: Error paths listed in a re-ask; the rest are counted (a long list helps no model).
REASK_ERRORS_LISTED = 20


def reask_message(errors: Sequence[str]) -> str:
    """The follow-up user turn: what was wrong with the answer, by JSONPath."""
    listed = "\n".join(f"- {e}" for e in errors[:REASK_ERRORS_LISTED])
    more = len(errors) - REASK_ERRORS_LISTED
    tail = f"\n- and {more} more" if more > 0 else ""
    return (
        "Your answer does not fit the required JSON schema:\n"
        f"{listed}{tail}\n"
        "Reply again with only the corrected JSON."
    )


def _describe(error: ProviderError) -> tuple[str, str]:
    return error.kind.value, str(error)


def lanes_for(
    variants: Sequence[VariantRecord],
    endpoints: Mapping[str, EndpointConfig],
    providers: Mapping[str, Provider],
    limiters: Mapping[str, Limiter],
) -> list[Lane]:
    """Group variants by endpoint: one feeder per endpoint, so one slow lane blocks no other."""
    by_endpoint: dict[str, list[int]] = {}
    for variant in variants:
        by_endpoint.setdefault(variant.endpoint, []).append(variant.index)
    return [
        Lane(endpoints[name], providers[name], limiters[name], tuple(indexes))
        for name, indexes in by_endpoint.items()
    ]
