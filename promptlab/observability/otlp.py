"""A run's spans as OTLP protobuf, made in the export child from the rows the engine
recorded (offload.py hands them down): what each span is named, its ids, times, status
and GenAI attributes.

The spans are built straight as protobuf messages. The SDK's encoder takes a
ReadableSpan per span and builds every attribute's message in Python (about 200 us an
item with its attempt, here), and on a small machine the child's work competes with
the engine for the cores. Most of an item's attributes repeat across a run (its model,
variant, provider, prompt version, outcome), so each distinct attribute's message is
made once and copied (about 35 us an item). The resource and the scope are encoded
once, by the SDK's own encoder, so a request is what the SDK's exporter would send
(tests/test_otel.py re-encodes every request it receives with the SDK and compares).
"""

from __future__ import annotations

import json
import random
import struct
from collections.abc import Sequence
from datetime import datetime
from typing import Any, cast

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, SpanFlags, Status
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind

from promptlab.observability.tracing import span_id_bytes

#: A final row's fields as they cross the pipe, in this order (offload.py reads them).
FINAL_FIELDS = (
    "key",
    "run_id",
    "status",
    "prompt_version_id",
    "model",
    "attempts",
    "finished_at",
    "error_kind",
    "input_tokens",
    "output_tokens",
    "model_version",
    "finish_reason",
)
#: An attempt row's fields as they cross the pipe, in this order.
ATTEMPT_FIELDS = (
    "attempt",
    "started_at",
    "ended_at",
    "outcome",
    "error_kind",
    "http_status",
    "wait_ms",
    "wait_reason",
)
#: The sampling parameters an item's span names (`gen_ai.request.*`), when numbers.
PARAMS = ("temperature", "top_p", "max_tokens")

#: A span made by the SDK's tracer (a run's): name, trace id, span id, parent span id
#: (0: a root), OTLP kind, start and end (ns), status code and description, attributes.
Flat = tuple[str, int, int, int, int, int, int, int, str | None, dict[str, Any]]
#: An item: trace id, its run's span id, provider, variant, FINAL_FIELDS, PARAMS, the
#: output as shown (None: not captured), and ATTEMPT_FIELDS of each attempt.
Item = tuple[int, int, str, str, tuple[Any, ...], tuple[Any, ...], str | None, list[Any]]
#: What one export hands the child: the SDK's spans (runs) and the items.
Batch = tuple[list[Flat], list[Item]]

KINDS = {
    SpanKind.INTERNAL: Span.SpanKind.SPAN_KIND_INTERNAL,
    SpanKind.SERVER: Span.SpanKind.SPAN_KIND_SERVER,
    SpanKind.CLIENT: Span.SpanKind.SPAN_KIND_CLIENT,
    SpanKind.PRODUCER: Span.SpanKind.SPAN_KIND_PRODUCER,
    SpanKind.CONSUMER: Span.SpanKind.SPAN_KIND_CONSUMER,
}
CLIENT = Span.SpanKind.SPAN_KIND_CLIENT
#: As the SDK marks a span whose parent is local (or that has none).
FLAGS = SpanFlags.SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK
ERROR = Status.StatusCode.STATUS_CODE_ERROR
#: Distinct attribute messages kept per child before the cache starts over.
CACHE_MAX = 4096


def any_value(value: Any) -> AnyValue:
    """A value as the SDK's encoder writes it (the same checks, in the same order)."""
    if value is None:
        return AnyValue()
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, str):
        return AnyValue(string_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value)
    if isinstance(value, float):
        return AnyValue(double_value=value)
    if isinstance(value, bytes):
        return AnyValue(bytes_value=value)
    if isinstance(value, Sequence):
        return AnyValue(array_value=ArrayValue(values=[any_value(v) for v in value]))
    raise TypeError(f"an attribute value of type {type(value).__name__}")


def template(resource: Resource, scope: InstrumentationScope) -> ExportTraceServiceRequest:
    """A request holding no span: the resource and the scope, as the SDK encodes them."""
    probe = ReadableSpan(
        "probe", SpanContext(1, 1, False), resource=resource, instrumentation_scope=scope
    )
    request = encode_spans([probe])
    del request.resource_spans[0].scope_spans[0].spans[:]
    return request


def _ns(at: datetime) -> int:
    return int(at.timestamp() * 1_000_000_000)


def _span_id() -> bytes:
    """A random span id (an attempt's), never the invalid 0, as the SDK draws them."""
    while not (value := random.getrandbits(64)):
        pass
    return value.to_bytes(8, "big")


# The protobuf wire format, for the few fields written by hand: a field's tag is its
# number << 3 | its wire type (0 varint, 1 fixed64, 2 length-delimited, 5 fixed32).
def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _field(tag: bytes, payload: bytes) -> bytes:
    """A length-delimited field (a string, bytes or a message)."""
    return tag + _varint(len(payload)) + payload


_TIME = struct.Struct("<Q").pack  # fixed64, little-endian
#: A span's fields: 1 trace id, 2 span id, 4 parent, 5 name, 6 kind, 7 and 8 start and
#: end, 9 each attribute, 15 status, 16 flags; a span is field 2 of its ScopeSpans.
TRACE, SPAN, PARENT, NAME = b"\x0a\x10", b"\x12\x08", b"\x22\x08", b"\x2a"
CLIENT_KIND, START, END, ATTRIBUTE, STATUS = b"\x30\x03", b"\x39", b"\x41", b"\x4a", b"\x7a"
FLAGS_FIELD = b"\x85\x01" + struct.pack("<I", FLAGS)
IN_SCOPE = b"\x12"
#: An attribute whose value is a string no other item shares: key, then its value.
_KEY, _VALUE, _STRING = b"\x0a", b"\x12", b"\x0a"


class Encoder:
    """Batches of runs' and items' rows into OTLP/HTTP request bodies.

    An item's spans are written as protobuf bytes by hand from parts made once: each
    distinct attribute (key and value), each status, each span name (a protobuf
    message's fields are its bytes one after the other, so a span is its fields'
    bytes joined). The rest, a run's span, goes through the protobuf classes."""

    def __init__(self, resource: Resource, scope: InstrumentationScope) -> None:
        request = template(resource, scope)
        resource_spans = request.resource_spans[0]
        scope_spans = resource_spans.scope_spans[0]
        self._resource = _field(b"\x0a", resource_spans.resource.SerializeToString())
        self._scope = _field(b"\x0a", scope_spans.scope.SerializeToString())
        urls = (scope_spans.schema_url, resource_spans.schema_url)
        self._schemas = [_field(b"\x1a", url.encode()) if url else b"" for url in urls]
        self._parts: dict[tuple[Any, ...], bytes] = {}

    def request(self, batch: Batch) -> bytes:
        """One export's request body: every span of `batch`, in one ResourceSpans and
        one ScopeSpans (the resource and scope as the SDK encodes them)."""
        runs, items = batch
        spans = [_field(IN_SCOPE, self._run_span(flat).SerializeToString()) for flat in runs]
        for item in items:
            spans.extend(self._item_spans(item))
        scope_spans = b"".join([self._scope, *spans, self._schemas[0]])
        resource_spans = self._resource + _field(b"\x12", scope_spans) + self._schemas[1]
        return _field(b"\x0a", resource_spans)

    def kv(self, key: str, value: Any) -> bytes:
        """An attribute as a span's field, made once per distinct key and value."""
        found = self._parts.get((key, type(value), value))
        if found is None:
            if len(self._parts) >= CACHE_MAX:
                self._parts.clear()
            made = KeyValue(key=key, value=any_value(value)).SerializeToString()
            found = self._parts[(key, type(value), value)] = _field(ATTRIBUTE, made)
        return found

    def _part(self, kind: str, value: Any) -> bytes:
        """A span's name or status field, made once per distinct one."""
        found = self._parts.get((kind, value))
        if found is None:
            if kind == "name":
                found = _field(NAME, value.encode())
            else:  # an error's status; an unset one is empty
                made = Status(code=ERROR, message=value).SerializeToString() if value else b""
                found = _field(STATUS, made)
            self._parts[(kind, value)] = found
        return found

    def _run_span(self, flat: Flat) -> Span:
        name, trace_id, span_id, parent, kind, start, end, code, text, attributes = flat
        # An empty id or message is an unset one (proto3): what the SDK writes for None.
        return Span(
            trace_id=trace_id.to_bytes(16, "big"),
            span_id=span_id.to_bytes(8, "big"),
            parent_span_id=parent.to_bytes(8, "big") if parent else b"",
            name=name,
            kind=cast("Span.SpanKind.ValueType", kind),
            start_time_unix_nano=start,
            end_time_unix_nano=end,
            attributes=[KeyValue(key=k, value=any_value(v)) for k, v in attributes.items()],
            status=Status(code=cast("Status.StatusCode.ValueType", code), message=text or ""),
            flags=FLAGS,
        )

    def _item_spans(self, item: Item) -> list[bytes]:
        """The item's span (a child of its run's) and each attempt's (children of it)."""
        trace_id, run_span, provider, variant, final, params, shown, attempts = item
        key, status, kind = final[0], final[2], final[7]
        trace, own = trace_id.to_bytes(16, "big"), span_id_bytes(key)
        finished = final[6]
        start = _ns(min([a[1] for a in attempts], default=finished))
        end = max(start, _ns(finished))
        attributes = self._item_attributes(provider, variant, final, params, shown)
        failed = (kind or "failed") if status == "failed" else None
        if failed is not None:
            attributes.append(self.kv("error.type", failed))
        span = b"".join(
            [
                TRACE,
                trace,
                SPAN,
                own,
                PARENT,
                run_span.to_bytes(8, "big"),
                self._part("name", f"chat {final[4]}"),
                CLIENT_KIND,
                START,
                _TIME(start),
                END,
                _TIME(end),
                *attributes,
                self._part("status", failed),
                FLAGS_FIELD,
            ]
        )
        spans = [_field(IN_SCOPE, span)]
        spans.extend(_field(IN_SCOPE, self._attempt_span(trace, own, a)) for a in attempts)
        return spans

    def _item_attributes(
        self,
        provider: str,
        variant: str,
        final: tuple[Any, ...],
        params: tuple[Any, ...],
        shown: str | None,
    ) -> list[bytes]:
        """The GenAI conventions' attributes and promptlab's own, of an item's span."""
        (
            key,
            run_id,
            status,
            version,
            model,
            attempts,
            _,
            error_kind,
            input_tokens,
            output_tokens,
            model_version,
            finish_reason,
        ) = final
        kv = self.kv
        attributes = [
            kv("gen_ai.operation.name", "chat"),
            kv("gen_ai.provider.name", provider),
            kv("gen_ai.request.model", model),
            kv("promptlab.run.id", run_id),
            kv("promptlab.variant", variant),
            kv("promptlab.prompt_version_id", version),
            _unique("promptlab.item.key", key),
            kv("promptlab.outcome", status),
            kv("promptlab.attempts", attempts),
        ]
        for name, value in zip(PARAMS, params, strict=True):
            if isinstance(value, int | float):
                attributes.append(kv(f"gen_ai.request.{name}", value))
        optional = (
            ("gen_ai.usage.input_tokens", input_tokens),
            ("gen_ai.usage.output_tokens", output_tokens),
            ("gen_ai.response.model", model_version),
            ("promptlab.error.kind", error_kind),
        )
        attributes.extend(kv(name, value) for name, value in optional if value is not None)
        if finish_reason is not None:
            attributes.append(kv("gen_ai.response.finish_reasons", (finish_reason,)))
        if shown is not None:
            message = [{"role": "assistant", "parts": [{"type": "text", "content": shown}]}]
            attributes.append(_unique("gen_ai.output.messages", json.dumps(message)))
        return attributes

    def _attempt_span(self, trace: bytes, item: bytes, attempt: tuple[Any, ...]) -> bytes:
        # An answered attempt says little its item does not, but what it waited for before
        # it went (the limiter's rate or gate, a retry's back-off); a failed one says why it
        # failed, the class the engine retries on (each attribute costs its encoding).
        number, started, ended, outcome, error_kind, http_status, wait_ms, reason = attempt
        attributes = [self.kv("promptlab.attempt", number)]
        if reason:
            attributes += [
                self.kv("promptlab.wait.ms", wait_ms),
                self.kv("promptlab.wait.reason", reason),
            ]
        failed = None
        if outcome != "ok":
            failed = error_kind or "error"
            attributes += [
                self.kv("error.type", failed),
                self.kv("promptlab.error.kind", failed),
                self.kv("promptlab.retry.reason", failed),
            ]
            if http_status is not None:
                attributes.append(self.kv("http.response.status_code", http_status))
        start = _ns(started)
        return b"".join(
            [
                TRACE,
                trace,
                SPAN,
                _span_id(),
                PARENT,
                item,
                self._part("name", f"attempt {number}"),
                CLIENT_KIND,
                START,
                _TIME(start),
                END,
                _TIME(max(start, _ns(ended))),
                *attributes,
                self._part("status", failed),
                FLAGS_FIELD,
            ]
        )


def _unique(key: str, text: str) -> bytes:
    """A string attribute as a span's field, for a value no other span shares."""
    value = _field(_VALUE, _field(_STRING, text.encode()))
    return _field(ATTRIBUTE, _field(_KEY, key.encode()) + value)
