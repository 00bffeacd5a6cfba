"""What a run's items leave behind: attempt rows, one final row each with its trace event,
the live counters and the anomaly alerts, all handed to the writer on the engine loop."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from promptlab.audit.chain import AuditDraft, Masker, attempt_values, row_digest, run_chain
from promptlab.checks.anomalies import RunDetector, observation_of, schema_fields
from promptlab.checks.plugged import CheckUse, run_checks, worse
from promptlab.checks.rules import RuleStatus
from promptlab.checks.validation import Checker, CheckStatus, OutputCheck
from promptlab.clock import Clock
from promptlab.engine.record import trace
from promptlab.engine.record.progress import Counters
from promptlab.engine.record.spill import MAX_OUTPUT_CHARS, keep_too_large
from promptlab.engine.record.writer import BatchWriter
from promptlab.errors import ProviderError
from promptlab.prompts.templates import Template
from promptlab.providers.base import CompletionResponse
from promptlab.providers.config import EndpointConfig, cost_usd
from promptlab.records import (
    AlertRecord,
    AttemptRow,
    FinalRow,
    ItemErrorKind,
    ItemStatus,
    PendingItem,
    VariantRecord,
)

#: Longest error message kept on an attempt or result.
MAX_MESSAGE_CHARS = 2_000
#: What a response says of its tokens' log-probabilities, stored as it is on its result.
LOGPROB_FIELDS = ("token_entropy", "logprob_mean", "logprob_tokens")


def _status(response: CompletionResponse | None) -> int | None:
    """An answer's HTTP status; None for an answer that came over no HTTP (`sim:`)."""
    return response.http_status if response is not None else None


class ItemObserver(Protocol):
    """What watches the rows as they are recorded (observability/spans.py's RunSpans)."""

    def attempt(self, row: AttemptRow) -> None: ...

    def final(self, row: FinalRow, variant: str) -> None: ...


class ItemRecorder:
    """Records one run's items. Holds, per item until its final row, its trace stages and
    its row params, and knows which dispatched items have no final row yet."""

    def __init__(
        self,
        run_id: str,
        variants: Mapping[int, VariantRecord],
        templates: Mapping[int, Template],
        checkers: Mapping[int, Checker],
        writer: BatchWriter,
        counters: Counters,
        clock: Clock,
        *,
        alert_sink: Callable[[list[AlertRecord]], None] | None,
        reask: int,
        audit: bool,
        masker: Masker | None,
        on_final: Callable[[PendingItem, str, str | None], None] | None = None,
        output_checks: Sequence[CheckUse] = (),
    ) -> None:
        self.run_id = run_id
        #: The spec's output checks, run on every answer (checks/plugged.py).
        self.output_checks = tuple(output_checks)
        #: Told each final row's item, status and stored output (a generated-history
        #: replay's next turn waits for it: engine/send/chains.py).
        self.on_final = on_final
        self.variants = variants
        self.templates = templates
        self.checkers = checkers
        self.writer = writer
        self.counters = counters
        self.clock = clock
        self.alert_sink = alert_sink
        self.reask = reask
        #: Trace events go to the writer with the rows they describe (promptlab.audit.chain).
        self.audit = audit
        self.chain = run_chain(run_id)
        self.masker = masker if masker else None
        #: Sees each attempt and final row as recorded (the run's trace spans), if set.
        self.observer: ItemObserver | None = None
        #: Render and preflight stages of items in flight, until their final row (flat
        #: dicts of strings and numbers: see trace.result_payload).
        self.traces: dict[str, dict[str, Any]] = {}
        #: Params of items whose variant reads some from dataset columns, until final.
        self.row_params: dict[str, Mapping[str, Any]] = {}
        #: The context shard of replayed turns sent with one, until final.
        self.row_shards: dict[str, str] = {}
        #: Keys of dispatched items without their final row (as many as are in flight).
        self._open: set[str] = set()
        #: Anomaly detectors fed each final row as it is recorded (O(1) per item); what
        #: they raise goes to `alert_sink` (the engine stores it off the loop).
        self.detector = RunDetector(
            run_id,
            {
                variants[index].name: schema_fields(template.output_schema)
                for index, template in templates.items()
            },
            now=clock.now,
        )

    def dispatched(self, item: PendingItem) -> None:
        """The item is in flight; it stays open until its final row."""
        self._open.add(item.key)
        self.writer.dispatched(item.key)
        self.counters.dispatched()

    def batch_line(self, item: PendingItem, batch_id: str, line: str | None) -> None:
        """The provider batch and line that answered the item, in its trace."""
        stages = self.traces.get(item.key) if self.audit else None
        if stages is not None:
            stages["batch_id"], stages["batch_line"] = batch_id, line

    def too_large(self, item: PendingItem, attempts: int, response: CompletionResponse) -> None:
        """An answer longer than a result row holds: kept in a file, and the item's final
        row a `too_large` failure naming its size and where it is."""
        kept = keep_too_large(self.writer.spill_dirs, self.run_id, item.key, response.text)
        where = f"kept in {kept}" if kept is not None else "not kept: no folder took it"
        message = (
            f"the answer is {len(response.text):,} characters, over the {MAX_OUTPUT_CHARS:,} "
            f"a result row holds; {where}"
        )
        self.final(
            item, ItemStatus.FAILED, True, attempts, error=(ItemErrorKind.TOO_LARGE, message)
        )

    def is_open(self, item: PendingItem) -> bool:
        """Dispatched, and its final row not recorded yet."""
        return item.key in self._open

    def attempt(
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
        """One call's row: answered, failed with `error`, or (neither) an internal error."""
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
            http_status=error.status if error else _status(response),
            error_message=str(error)[:MAX_MESSAGE_CHARS] if error else None,
            wait_ms=wait_s * 1000,
            wait_reason=wait_reason,
            retry_after_s=error.retry_after_s if error else None,
            latency_ms=response.latency_ms if response is not None else elapsed_ms,
            reask=reask,
        )
        self.writer.attempt(row)
        if self.observer is not None:
            self.observer.attempt(row)
        if self.audit:
            self._trace_attempt(item, row, response, error)

    def _trace_attempt(
        self,
        item: PendingItem,
        row: AttemptRow,
        response: CompletionResponse | None,
        error: ProviderError | None,
    ) -> None:
        """An attempt in the item's trace: its own event when it failed or was re-asked,
        else its row's hash in the result event to come."""
        # A failed or re-asked attempt gets its own event; the answered one is read back
        # from `attempts` by the trace view (the result event covers its results row).
        answered = response is not None and not (self.reask and item.variant_index in self.checkers)
        # Which worker made the call (and signed its answer), when workers send.
        served_by = (
            response.served_by if response is not None else getattr(error, "served_by", None)
        )
        if answered:
            stages = self.traces.get(item.key)
            if stages is not None:  # the result event will hold the row's hash
                stages["attempt_sha256"] = row_digest(attempt_values(row))
                if served_by is not None:
                    stages["served_by"] = served_by
        else:
            payload = trace.attempt_payload(row, response, served_by)
            draft = AuditDraft(
                self.chain,
                "attempt",
                f"{item.key}/a{row.attempt}",
                row.ended_at,
                payload,
                run_id=self.run_id,
                trace_id=item.key,
            )
            self.writer.audit(draft)

    def final(
        self,
        item: PendingItem,
        status: str,
        was_in_flight: bool,
        attempts: int | None = None,
        *,
        error: tuple[str | None, str] | None = None,
        response: CompletionResponse | None = None,
        endpoint: EndpointConfig | None = None,
        check: OutputCheck | None = None,
        cache_hit: bool = False,
    ) -> FinalRow:
        """The item's one final row (returned), its result event, its count and what it
        tells the anomaly detectors; a `response` is checked and priced on `endpoint`,
        one from the response cache (`cache_hit`) costs 0 and has no latency."""
        variant = self.variants[item.variant_index]
        usage: dict[str, Any] = {}
        parsed: Any = None
        # Read, not popped, until the row is handed over: should anything below raise,
        # the guard's fallback row still carries the item's render and preflight stages.
        stages = self.traces.get(item.key) if self.audit else None
        masked: dict[str, int] = {}
        if response is not None and endpoint is not None:
            usage, parsed = self._usage(item, variant, response, endpoint, check, masked)
        if cache_hit:  # not sent: nothing paid, no time of its own to count
            usage |= {"cost_usd": 0.0, "latency_ms": None, "cache_hit": True}
        row = self._final_row(item, variant, status, attempts, error, usage)
        draft = None
        if self.audit:
            draft = AuditDraft(
                self.chain,
                "result",
                f"{item.key}/final/{row.attempts}",
                row.finished_at,
                trace.result_payload(row, stages, self._masking(masked)),
                run_id=self.run_id,
                trace_id=item.key,
            )
        # On disk (the answer log) before the item counts as received below.
        self.writer.final(row, draft)
        self.traces.pop(item.key, None)
        self.row_params.pop(item.key, None)
        self._open.discard(item.key)
        self.counters.finished(status, was_in_flight)
        if self.observer is not None:
            self.observer.final(row, variant.name)
        if self.on_final is not None:
            self.on_final(item, status, row.output_text)
        if status != ItemStatus.CANCELLED:
            self._detect(row, parsed)
        return row

    def _usage(
        self,
        item: PendingItem,
        variant: VariantRecord,
        response: CompletionResponse,
        endpoint: EndpointConfig,
        check: OutputCheck | None,
        masked: dict[str, int],
    ) -> tuple[dict[str, Any], Any]:
        """An answer's FinalRow fields (output, tokens, cost, its check) and the JSON value
        found in it; what the masking masks is counted into `masked`."""
        checked, parsed = self._check(item.variant_index, response, check)
        text = response.text
        if self.masker is not None:
            # Checked as answered; stored (results and trace) with the patterns masked.
            text = self.masker.mask(text, masked)
        usage: dict[str, Any] = {
            "output_text": text,
            "input_tokens": response.input_tokens,
            "output_tokens": response.output_tokens,
            "finish_reason": str(response.finish_reason),
            "model_version": response.model_version,
            "latency_ms": response.latency_ms,
            **{name: getattr(response, name) for name in LOGPROB_FIELDS},
            "cost_usd": cost_usd(
                endpoint, variant.model, response.input_tokens, response.output_tokens
            ),
            **checked,
        }
        return usage, parsed

    def _final_row(
        self,
        item: PendingItem,
        variant: VariantRecord,
        status: str,
        attempts: int | None,
        error: tuple[str | None, str] | None,
        usage: Mapping[str, Any],
    ) -> FinalRow:
        return FinalRow(
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
            params=self.row_params.get(item.key, variant.params),
            attempts=item.attempts if attempts is None else attempts,
            finished_at=self.clock.now(),
            error_kind=error[0] if error else None,
            error_message=error[1][:MAX_MESSAGE_CHARS] if error else None,
            shard_id=self.row_shards.pop(item.key, None),
            **usage,
        )

    def _masking(self, masked: Mapping[str, int]) -> dict[str, int] | None:
        """What the masking masked in the output, every pattern named (0 included): the
        trace view masks the prompt it renders again with the same patterns."""
        if self.masker is None:
            return None
        return {name: masked.get(name, 0) for name in self.masker.names}

    def _detect(self, row: FinalRow, parsed: Any) -> None:
        obs = observation_of(
            row.seq,
            row.variant,
            row.status,
            row.error_kind,
            row.check_status,
            row.output_text,
            parsed,
        )
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
            fields: dict[str, Any] = {"check_status": CheckStatus.NO_SCHEMA.value}
            return self._output_checks(fields, response.text, None, None, ()), None
        check = done or checker.check(response.text, str(response.finish_reason))
        fields = {"check_status": check.status.value, "check_errors": check.errors}
        rules = self.templates[variant_index].rule_set
        status: RuleStatus | None = None
        failed: Sequence[Any] = ()
        if rules and check.status in (CheckStatus.VALID, CheckStatus.REPAIRED):
            status, failed = rules.check(check.parsed)
        return self._output_checks(
            fields, response.text, check.parsed, status, failed
        ), check.parsed

    def _output_checks(
        self,
        fields: dict[str, Any],
        text: str,
        parsed: Any,
        status: RuleStatus | None,
        failed: Sequence[Any],
    ) -> dict[str, Any]:
        """The rules' verdict with the spec's output checks' (checks/plugged.py) joined."""
        errors = tuple(map(str, failed))
        if self.output_checks:
            checked, problems = run_checks(self.output_checks, text, parsed)
            status, errors = worse(status, checked), (*errors, *problems)
        if status is not None:
            fields |= {"rule_status": status.value, "rule_errors": errors}
        return fields
