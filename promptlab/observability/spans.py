"""The spans themselves (the OpenTelemetry SDK, imported only when tracing is on): one
process's tracer provider, and one run's spans made from the rows the engine records."""

from __future__ import annotations

import contextvars
import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Span, SpanContext, SpanKind, Status, StatusCode

from promptlab.audit.masking import Masker
from promptlab.audit.redact import redact
from promptlab.observability.offload import SAMPLED, ChildExporter
from promptlab.observability.tracing import span_id_of, trace_id_of
from promptlab.records import AttemptRow, FinalRow

CAPTURE_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
#: How long the engine's close waits for pending spans to be exported.
FLUSH_MS = 5_000
DEFAULT_SERVICE = "promptlab"
#: The provider names of the GenAI conventions, by endpoint kind.
PROVIDERS = {"openai": "openai", "anthropic": "anthropic", "sim": "promptlab.sim"}
#: The trace id the next run span gets, when set (the run's own).
_NEXT_TRACE: contextvars.ContextVar[int | None] = contextvars.ContextVar("trace", default=None)
OK = Status(StatusCode.UNSET)


class _Ids(RandomIdGenerator):
    """Random ids, except for a run's span: its trace id is the run's own."""

    def generate_trace_id(self) -> int:
        return _NEXT_TRACE.get() or super().generate_trace_id()


class Tracing:
    """One process's tracer provider: runs started, spans exported in batches."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        service = environ.get("OTEL_SERVICE_NAME") or DEFAULT_SERVICE
        self.resource = Resource.create({"service.name": service})
        self.provider = TracerProvider(resource=self.resource, id_generator=_Ids())
        #: Items' and attempts' spans skip the tracer: they are made finished, from the
        #: rows recorded, and handed straight to the batch processor (a tenth of the
        #: cost of starting and ending each through the tracer, on the engine's loop);
        #: a child process encodes and sends them (observability/offload.py).
        self.processor = BatchSpanProcessor(ChildExporter(service))
        self.provider.add_span_processor(self.processor)
        self.tracer = self.provider.get_tracer("promptlab")
        self.scope = InstrumentationScope("promptlab")
        self.ids = RandomIdGenerator()
        self.capture = environ.get(CAPTURE_ENV, "").strip().lower() == "true"

    def run(
        self, run_id: str, name: str, kinds: Mapping[str, str], masker: Masker | None
    ) -> RunSpans:
        """The run's span, begun now; `kinds` maps its endpoints to their kinds."""
        token = _NEXT_TRACE.set(trace_id_of(run_id))
        try:
            span = self.tracer.start_span(
                f"run {name}",
                context=Context(),  # a root: a run is a trace of its own
                kind=SpanKind.INTERNAL,
                attributes={"promptlab.run.id": run_id, "promptlab.run.name": name},
            )
        finally:
            _NEXT_TRACE.reset(token)
        return RunSpans(self, span, kinds, masker)

    def finished(
        self, name: str, context: SpanContext, parent: SpanContext, times: tuple[int, int],
        attributes: dict[str, Any], status: Status = OK,
    ) -> None:  # fmt: skip
        """A span that has already ended, exported with the others."""
        self.processor.on_end(
            ReadableSpan(
                name=name,
                context=context,
                parent=parent,
                resource=self.resource,
                attributes=attributes,
                kind=SpanKind.CLIENT,
                status=status,
                start_time=times[0],
                end_time=max(times),
                instrumentation_scope=self.scope,
            )  # fmt: skip
        )

    def shutdown(self) -> None:
        """Export what is pending (for at most FLUSH_MS), then stop (the engine's close)."""
        self.provider.force_flush(FLUSH_MS)
        self.provider.shutdown()


def _ns(at: datetime) -> int:
    return int(at.timestamp() * 1_000_000_000)


class RunSpans:
    """One run's spans: each attempt kept until its item's final row, then all sent."""

    def __init__(
        self, tracing: Tracing, span: Span, kinds: Mapping[str, str], masker: Masker | None
    ) -> None:
        self._tracing = tracing
        self.span = span
        self._context = span.get_span_context()
        self._providers = {name: PROVIDERS.get(kind, kind) for name, kind in kinds.items()}
        self._masker = masker
        self._attempts: dict[str, list[AttemptRow]] = {}

    def attempt(self, row: AttemptRow) -> None:
        self._attempts.setdefault(row.key, []).append(row)

    def final(self, row: FinalRow, variant: str) -> None:
        """The item's span and its attempts' spans, from their recorded times."""
        attempts = self._attempts.pop(row.key, [])
        start = min([a.started_at for a in attempts], default=row.finished_at)
        item = SpanContext(self._context.trace_id, span_id_of(row.key), False, SAMPLED)
        status = OK
        attributes = self._item_attributes(row, variant)
        if row.status == "failed":
            status = Status(StatusCode.ERROR, row.error_kind or "failed")
            attributes["error.type"] = row.error_kind or "failed"
        for attempt in attempts:
            self._attempt_span(attempt, row, item)
        times = (_ns(start), _ns(row.finished_at))
        self._tracing.finished(f"chat {row.model}", item, self._context, times, attributes, status)

    def end(self, status: str, reason: str | None = None) -> None:
        """The run's end (or its pause): its span closed with how it ended."""
        self.span.set_attribute("promptlab.run.status", status)
        if status == "failed":
            self.span.set_status(Status(StatusCode.ERROR, reason or "failed"))
        self.span.end()

    def _item_attributes(self, row: FinalRow, variant: str) -> dict[str, Any]:
        params = row.params or {}
        provider = self._providers.get(row.endpoint, "openai")
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": provider,
            "gen_ai.request.model": row.model,
            "promptlab.run.id": row.run_id,
            "promptlab.variant": variant,
            "promptlab.prompt_version_id": row.prompt_version_id,
            "promptlab.item.key": row.key,
            "promptlab.outcome": row.status,
            "promptlab.attempts": row.attempts,
        }
        for name in ("temperature", "top_p", "max_tokens"):
            if isinstance(params.get(name), int | float):
                attributes[f"gen_ai.request.{name}"] = params[name]
        optional = {
            "gen_ai.usage.input_tokens": row.input_tokens,
            "gen_ai.usage.output_tokens": row.output_tokens,
            "gen_ai.response.model": row.model_version,
            "promptlab.error.kind": row.error_kind,
        }
        attributes.update({k: v for k, v in optional.items() if v is not None})
        if row.finish_reason is not None:
            attributes["gen_ai.response.finish_reasons"] = (row.finish_reason,)
        if self._tracing.capture and row.output_text is not None:
            attributes["gen_ai.output.messages"] = json.dumps(
                [{"role": "assistant", "parts": [{"type": "text", "content": self._shown(row)}]}]
            )
        return attributes

    def _shown(self, row: FinalRow) -> str:
        """The output as stored: masked by PROMPTLAB_MASK, keys redacted."""
        text = row.output_text or ""
        if self._masker is not None:
            text = self._masker.mask(text, {})
        return redact(text)

    def _attempt_span(self, attempt: AttemptRow, row: FinalRow, item: SpanContext) -> None:
        # An answered attempt says little its item does not; a failed one says why and
        # how long the engine waited before the next (each attribute costs its encoding).
        attributes: dict[str, Any] = {"promptlab.attempt": attempt.attempt}
        status = OK
        if attempt.outcome != "ok":
            kind = attempt.error_kind or "error"
            attributes["error.type"] = attributes["promptlab.error.kind"] = kind
            attributes["promptlab.retry.wait_ms"] = attempt.wait_ms
            if attempt.http_status is not None:
                attributes["http.response.status_code"] = attempt.http_status
            if attempt.wait_reason:
                attributes["promptlab.retry.reason"] = attempt.wait_reason
            status = Status(StatusCode.ERROR, kind)
        own = SpanContext(item.trace_id, self._tracing.ids.generate_span_id(), False, SAMPLED)
        times = (_ns(attempt.started_at), _ns(attempt.ended_at))
        self._tracing.finished(f"attempt {attempt.attempt}", own, item, times, attributes, status)
