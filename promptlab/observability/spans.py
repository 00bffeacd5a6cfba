"""The engine's side of tracing (the OpenTelemetry SDK, imported only when tracing is on):
one process's tracer provider, and one run's span with its items handed on as rows."""

from __future__ import annotations

import contextvars
from collections.abc import Mapping

from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from promptlab.audit.masking import Masker
from promptlab.audit.redact import redact
from promptlab.observability.offload import ChildExporter, ItemSpans
from promptlab.observability.tracing import trace_id_of
from promptlab.records import AttemptRow, FinalRow

CAPTURE_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
#: How long the engine's close waits for pending spans to be exported.
FLUSH_MS = 5_000
DEFAULT_SERVICE = "promptlab"
#: The provider names of the GenAI conventions, by endpoint kind.
PROVIDERS = {"openai": "openai", "anthropic": "anthropic", "sim": "promptlab.sim"}
#: The trace id the next run span gets, when set (the run's own).
_NEXT_TRACE: contextvars.ContextVar[int | None] = contextvars.ContextVar("trace", default=None)


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
        #: Items skip the tracer: each is handed to the batch processor as its rows
        #: (offload.ItemSpans), and a child process makes, encodes and sends its spans
        #: (offload.py, otlp.py); the engine's loop builds no span per item.
        self.processor = BatchSpanProcessor(ChildExporter(service))
        self.provider.add_span_processor(self.processor)
        self.tracer = self.provider.get_tracer("promptlab")
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

    def shutdown(self) -> None:
        """Export what is pending (for at most FLUSH_MS), then stop (the engine's close)."""
        self.provider.force_flush(FLUSH_MS)
        self.provider.shutdown()


class RunSpans:
    """One run's spans: each attempt's row kept until its item's final row, then the
    item handed to the batch processor with them (the child makes their spans)."""

    def __init__(
        self, tracing: Tracing, span: Span, kinds: Mapping[str, str], masker: Masker | None
    ) -> None:
        self.span = span
        self._context = span.get_span_context()
        self._resource = tracing.resource
        self._emit = tracing.processor.on_end
        self._capture = tracing.capture
        self._providers = {name: PROVIDERS.get(kind, kind) for name, kind in kinds.items()}
        self._masker = masker
        self._attempts: dict[str, list[AttemptRow]] = {}

    def attempt(self, row: AttemptRow) -> None:
        self._attempts.setdefault(row.key, []).append(row)

    def final(self, row: FinalRow, variant: str) -> None:
        """The item and its attempts, queued for export as their rows."""
        attempts = self._attempts.pop(row.key, ())
        shown = self._shown(row) if self._capture and row.output_text is not None else None
        provider = self._providers.get(row.endpoint, "openai")
        self._emit(
            ItemSpans(self._context, self._resource, provider, variant, row, attempts, shown)
        )

    def end(self, status: str, reason: str | None = None) -> None:
        """The run's end (or its pause): its span closed with how it ended."""
        self.span.set_attribute("promptlab.run.status", status)
        if status == "failed":
            self.span.set_status(Status(StatusCode.ERROR, reason or "failed"))
        self.span.end()

    def _shown(self, row: FinalRow) -> str:
        """The output as stored: masked by PROMPTLAB_MASK, keys redacted."""
        text = row.output_text or ""
        if self._masker is not None:
            text = self._masker.mask(text, {})
        return redact(text)
