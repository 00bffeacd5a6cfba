"""Spans encoded and sent from a child process, so that the engine does not pay for it.

Encoding a span to OTLP protobuf is Python work (about 70 us a span here), and in the
engine's process it competes with the engine's loop for the interpreter: exporting
from the engine's process cost 20% of its no-limit ceiling. The SDK's batch processor
still batches the spans in the engine's process; its exporter (`ChildExporter`) only
hands each batch, as plain tuples, down a pipe to a child (`python -m
promptlab.observability.offload`), which rebuilds the spans and exports them with the
SDK's own OTLP/HTTP exporter, configured by the same OTEL_* variables (it inherits the
environment). The child reads only its parent's pipe, and ends when the pipe closes.
"""

from __future__ import annotations

import contextlib
import pickle
import subprocess
import sys
from collections.abc import Sequence
from typing import IO, Any, BinaryIO

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

#: How long the engine's close waits for the child to send what it was handed.
CHILD_EXIT_S = 10.0
SAMPLED = TraceFlags(TraceFlags.SAMPLED)

#: A span as it crosses the pipe: name, trace id, span id, parent span id (0: a root),
#: kind, start and end (ns), status code and description, attributes.
Flat = tuple[str, int, int, int, int, int, int, int, str | None, dict[str, Any]]


def flat(span: ReadableSpan) -> Flat:
    context, parent = span.context, span.parent
    assert context is not None
    return (
        span.name, context.trace_id, context.span_id, parent.span_id if parent else 0,
        span.kind.value, span.start_time or 0, span.end_time or 0,
        span.status.status_code.value, span.status.description, dict(span.attributes or {}),
    )  # fmt: skip


def rebuilt(item: Flat, resource: Resource, scope: InstrumentationScope) -> ReadableSpan:
    name, trace_id, span_id, parent_id, kind, start, end, code, text, attributes = item
    parent = SpanContext(trace_id, parent_id, False, SAMPLED) if parent_id else None
    return ReadableSpan(
        name=name, context=SpanContext(trace_id, span_id, False, SAMPLED), parent=parent,
        resource=resource, attributes=attributes, kind=SpanKind(kind),
        status=Status(StatusCode(code), text), start_time=start, end_time=end,
        instrumentation_scope=scope,
    )  # fmt: skip


class ChildExporter(SpanExporter):
    """Hands each batch to the child that exports it; never blocks on the collector."""

    def __init__(self, service: str) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "promptlab.observability.offload", service],
            stdin=subprocess.PIPE,
        )
        assert self._proc.stdin is not None
        self._pipe: IO[bytes] = self._proc.stdin

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            pickle.dump([flat(span) for span in spans], self._pipe, pickle.HIGHEST_PROTOCOL)
            self._pipe.flush()
        except (OSError, ValueError):  # the child is gone: these spans are lost, not the run
            return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True  # what was handed over is the child's to send; shutdown waits for it

    def shutdown(self) -> None:
        """Close the pipe; the child sends what it holds, then exits (waited for)."""
        with contextlib.suppress(OSError):
            self._pipe.close()
        try:
            self._proc.wait(CHILD_EXIT_S)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()


def serve(service: str, pipe: BinaryIO) -> None:
    """The child: rebuild each batch read from the pipe and export it over OTLP/HTTP."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    resource = Resource.create({"service.name": service})
    scope = InstrumentationScope("promptlab")
    exporter = OTLPSpanExporter()
    try:
        while True:
            try:
                batch = pickle.load(pipe)  # noqa: S301 - only the parent writes this pipe
            except EOFError:
                return
            exporter.export([rebuilt(item, resource, scope) for item in batch])
    finally:
        exporter.shutdown()


if __name__ == "__main__":
    serve(sys.argv[1], sys.stdin.buffer)
