"""Spans made, encoded and sent from a child process, so that the engine does not pay for it.

Making and encoding spans is Python work, and in the engine's process it competes with
the engine's loop for the interpreter. So the loop makes no span per item: it hands the
SDK's batch processor one `ItemSpans` per item (its final row, its attempts' rows), which
the processor queues and batches as it does any span. Its exporter (`ChildExporter`,
on the processor's thread) flattens each batch into plain tuples and writes it down a
pipe, in one pickle, to a child (`python -m promptlab.observability.offload`). The
child makes the spans and their protobuf (otlp.py: the GenAI attributes, the item's
span id from its key, an attempt's random one) and sends each batch with the SDK's
OTLP/HTTP exporter's own client, configured by the same OTEL_* variables (it inherits
the environment: endpoint, headers, compression, timeout, retries). The child reads
only its parent's pipe, and ends when the pipe closes.
"""

from __future__ import annotations

import contextlib
import logging
import pickle
import subprocess
import sys
from collections.abc import Sequence
from operator import attrgetter
from typing import IO, TYPE_CHECKING, BinaryIO

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext

from promptlab.observability.otlp import (
    ATTEMPT_FIELDS,
    FINAL_FIELDS,
    KINDS,
    PARAMS,
    Flat,
    Item,
)

if TYPE_CHECKING:  # the child needs only their field names (otlp.py): records import a lot
    from promptlab.records import AttemptRow, FinalRow

log = logging.getLogger(__name__)
#: How long the engine's close waits for the child to send what it was handed.
CHILD_EXIT_S = 10.0
_FINAL = attrgetter(*FINAL_FIELDS)
_ATTEMPT = attrgetter(*ATTEMPT_FIELDS)


class ItemSpans(ReadableSpan):
    """An item's span and its attempts' spans, still as the rows recorded them.

    The batch processor queues it as one span: it reads only the context's trace flags,
    here those of the item's run, whose trace it belongs to. `provider` names the
    endpoint's GenAI provider; `shown` is the output as it may be exported (None: not)."""

    def __init__(
        self,
        run: SpanContext,
        resource: Resource,
        provider: str,
        variant: str,
        row: FinalRow,
        attempts: Sequence[AttemptRow],
        shown: str | None,
    ) -> None:
        super().__init__("item", context=run, resource=resource)
        self.rows = (provider, variant, row, attempts, shown)

    def flat(self) -> Item:
        """The item as it crosses the pipe (otlp.py's `Item`)."""
        provider, variant, row, attempts, shown = self.rows
        context = self._context
        assert context is not None
        params = row.params or {}
        return (
            context.trace_id,
            context.span_id,
            provider,
            variant,
            _FINAL(row),
            tuple(params.get(name) for name in PARAMS),
            shown,
            [_ATTEMPT(a) for a in attempts],
        )


def flat(span: ReadableSpan) -> Flat:
    """A span the SDK's tracer made (a run's), as it crosses the pipe."""
    context, parent = span.context, span.parent
    assert context is not None
    return (
        span.name,
        context.trace_id,
        context.span_id,
        parent.span_id if parent else 0,
        KINDS[span.kind],
        span.start_time or 0,
        span.end_time or 0,
        span.status.status_code.value,
        span.status.description,
        dict(span.attributes or {}),
    )


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
        runs: list[Flat] = []
        items: list[Item] = []
        for span in spans:
            if isinstance(span, ItemSpans):
                items.append(span.flat())
            else:
                runs.append(flat(span))
        try:
            pickle.dump((runs, items), self._pipe, pickle.HIGHEST_PROTOCOL)
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
    """The child: encode each batch read from the pipe and send it over OTLP/HTTP."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    from promptlab.observability.otlp import Encoder

    _child_logging()
    encoder = Encoder(Resource.create({"service.name": service}), InstrumentationScope("promptlab"))
    exporter = OTLPSpanExporter()
    # The exporter's own client: what its export() does after encoding (the endpoint,
    # headers, compression, timeout and retries of the OTEL_* variables), given the
    # bytes otlp.py made. tests/test_otel.py pins that this SDK version has it.
    send = exporter._client.export
    try:
        while True:
            try:
                batch = pickle.load(pipe)  # noqa: S301 - only the parent writes this pipe
            except EOFError:
                return
            try:
                body = encoder.request(batch)
            except Exception:  # a batch that cannot be encoded is lost, not the rest
                log.exception("a batch of spans not encoded")
                continue
            try:
                send(body)  # retries as OTEL_* say, logging each transient failure
            except Exception as exc:  # noqa: BLE001 - a collector away: this batch is lost
                log.warning("a batch of spans not sent to the collector: %s", exc)
    finally:
        exporter.shutdown()


def _child_logging() -> None:
    """The child's lines (the exporter's retry warnings, a batch it could not send) on
    stderr as its parent writes its own: one JSON object a line when
    PROMPTLAB_LOG_FORMAT=json (inherited), else text that names the child. Unset, Python
    printed the bare message of each, a text line among a collector's JSON."""
    from promptlab.audit.logjson import json_handler, json_logs_asked

    if json_logs_asked():
        handler = json_handler()
    else:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("promptlab traces: %(levelname)s %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.WARNING)


if __name__ == "__main__":
    serve(sys.argv[1], sys.stdin.buffer)
