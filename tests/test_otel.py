"""Runs as OpenTelemetry traces (issue 42): a loopback OTLP/HTTP receiver decodes what
the engine exports with the `opentelemetry-proto` package, and the spans are checked
against the store: one trace per run, parent and child, the GenAI attributes, token
counts as stored, each retried attempt its own span with its error kind."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from promptlab.config import Settings
from promptlab.fakellm.server import RunningServer
from promptlab.observability.tracing import span_id_of, trace_id_of, tracing_from_env
from promptlab.store import Store
from promptlab.workbench import Workbench
from tests.item_run_helpers import item_spec


class Receiver:
    """An OTLP/HTTP trace receiver on a free loopback port; keeps every span it gets."""

    def __init__(self) -> None:
        self.spans: list[Any] = []
        self.requests: list[ExportTraceServiceRequest] = []
        self.resources: list[dict[str, Any]] = []
        self.paths: list[str] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the http.server name
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                request = ExportTraceServiceRequest.FromString(body)
                receiver.paths.append(self.path)
                receiver.requests.append(request)
                for resource_spans in request.resource_spans:
                    receiver.resources.append(attributes(resource_spans.resource.attributes))
                    for scope in resource_spans.scope_spans:
                        receiver.spans.extend(scope.spans)
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def value(any_value: AnyValue) -> Any:
    kind = any_value.WhichOneof("value")
    if kind == "array_value":
        return [value(v) for v in any_value.array_value.values]
    return getattr(any_value, kind) if kind else None


def attributes(pairs: Any) -> dict[str, Any]:
    return {pair.key: value(pair.value) for pair in pairs}


def as_the_sdk_encodes(request: ExportTraceServiceRequest) -> ExportTraceServiceRequest:
    """The request's spans made into the SDK's ReadableSpans and encoded by the SDK's own
    encoder: what its OTLP exporter would have sent for the same spans."""
    spans = []
    for resource_spans in request.resource_spans:
        resource = Resource(attributes(resource_spans.resource.attributes))
        for scope_spans in resource_spans.scope_spans:
            scope = InstrumentationScope(scope_spans.scope.name, scope_spans.scope.version or None)
            for span in scope_spans.spans:
                trace_id = int.from_bytes(span.trace_id, "big")
                parent = int.from_bytes(span.parent_span_id or bytes(8), "big")
                spans.append(
                    ReadableSpan(
                        name=span.name,
                        context=SpanContext(
                            trace_id,
                            int.from_bytes(span.span_id, "big"),
                            False,
                            TraceFlags(TraceFlags.SAMPLED),
                        ),
                        parent=SpanContext(trace_id, parent, False) if parent else None,
                        resource=resource,
                        attributes=attributes(span.attributes),
                        kind=SpanKind(span.kind - 1),  # OTLP counts from unspecified (0)
                        status=Status(StatusCode(span.status.code), span.status.message or None),
                        start_time=span.start_time_unix_nano,
                        end_time=span.end_time_unix_nano,
                        instrumentation_scope=scope,
                    )
                )
    return encode_spans(spans)


@pytest.fixture
def receiver(monkeypatch: pytest.MonkeyPatch) -> Iterator[Receiver]:
    running = Receiver()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", running.url)
    monkeypatch.setenv("OTEL_SERVICE_NAME", "promptlab-test")
    try:
        yield running
    finally:
        running.close()


def run_once(tmp_path: Path, base_url: str) -> tuple[str, Path]:
    """The item-view run over fakellm (retries, an invalid row); the engine closed after,
    so every span is exported."""
    settings = Settings.from_env().with_db(tmp_path / "otel.duckdb")
    with Workbench.open(settings) as wb:
        run_id = wb.runs.start(item_spec(tmp_path, base_url))
        assert wb.runs.wait(run_id, timeout=60).status == "completed"
    return run_id, settings.db_path


def stored(db: Path, run_id: str) -> tuple[dict[str, tuple[Any, ...]], dict[str, list[Any]]]:
    """(key -> status, input tokens, output tokens, attempts) and key -> error kinds of
    its failed attempts, as the store holds them."""
    with Store(db) as store, store.read() as cur:
        finals = cur.execute(
            "SELECT idempotency_key, status, input_tokens, output_tokens, attempts "
            "FROM results WHERE run_id = ?",
            [run_id],
        ).fetchall()
        failed = cur.execute(
            "SELECT idempotency_key, error_kind FROM attempts "
            "WHERE run_id = ? AND outcome = 'error' ORDER BY attempt",
            [run_id],
        ).fetchall()
    kinds: dict[str, list[Any]] = {}
    for key, kind in failed:
        kinds.setdefault(key, []).append(kind)
    return {row[0]: row[1:] for row in finals}, kinds


def test_a_run_is_one_trace_of_item_and_attempt_spans_as_stored(
    tmp_path: Path, receiver: Receiver, retrying_server: RunningServer
) -> None:
    run_id, db = run_once(tmp_path, retrying_server.openai_base_url)
    finals, failed_kinds = stored(db, run_id)
    assert receiver.paths and set(receiver.paths) == {"/v1/traces"}
    assert {r.get("service.name") for r in receiver.resources} == {"promptlab-test"}

    trace_id = trace_id_of(run_id).to_bytes(16, "big")
    assert {span.trace_id for span in receiver.spans} == {trace_id}  # one trace per run
    roots = [span for span in receiver.spans if not span.parent_span_id]
    assert len(roots) == 1 and attributes(roots[0].attributes)["promptlab.run.id"] == run_id
    run_span = roots[0]
    assert attributes(run_span.attributes)["promptlab.run.status"] == "completed"

    items = {
        span.span_id: span for span in receiver.spans if span.parent_span_id == run_span.span_id
    }
    assert len(items) == len(finals)
    attempts_of: dict[bytes, list[Any]] = {}
    for span in receiver.spans:
        if span.parent_span_id in items:
            attempts_of.setdefault(span.parent_span_id, []).append(span)
    assert len(receiver.spans) == 1 + len(items) + sum(map(len, attempts_of.values()))

    retried = 0
    for span_id, span in items.items():
        found = attributes(span.attributes)
        key = found["promptlab.item.key"]
        # The audit trail's trace id of the item (its key) names the span too.
        assert span_id == span_id_of(key).to_bytes(8, "big")
        status, input_tokens, output_tokens, attempts = finals[key]
        assert found["promptlab.outcome"] == status
        assert found["promptlab.run.id"] == run_id
        assert found["promptlab.variant"] in ("briefed", "plain")
        assert found["promptlab.prompt_version_id"].startswith("sha256:")
        assert found["gen_ai.operation.name"] == "chat"
        assert found["gen_ai.provider.name"] == "openai"
        assert found["gen_ai.request.model"] == "gpt-4o-mini"
        assert "gen_ai.output.messages" not in found  # content capture is off
        spans = sorted(attempts_of.get(span_id, []), key=lambda s: s.start_time_unix_nano)
        assert len(spans) == attempts  # every attempt made is a span of its own
        if status != "succeeded":
            continue
        assert (found["gen_ai.usage.input_tokens"], found["gen_ai.usage.output_tokens"]) == (
            input_tokens,
            output_tokens,
        )
        assert found["gen_ai.response.finish_reasons"] == ["stop"] or found[
            "gen_ai.response.finish_reasons"
        ] == ["length"]
        if found["promptlab.variant"] == "briefed":
            assert found["gen_ai.request.temperature"] == 0.2
        errors = [attributes(s.attributes) for s in spans if s.status.code == 2]
        assert [e["error.type"] for e in errors] == failed_kinds.get(key, [])
        assert all(e["promptlab.error.kind"] == "server" for e in errors)
        # Retried because the server failed, not for what the attempt waited for before
        # it went; the attempt after a failure waited for the retry's back-off.
        assert all(e["promptlab.retry.reason"] == "server" for e in errors)
        after = [attributes(s.attributes) for s in spans[1 : len(errors) + 1]]
        assert all(a["promptlab.wait.reason"] == "backoff" for a in after)
        assert all(s.start_time_unix_nano >= span.start_time_unix_nano for s in spans)
        retried += bool(errors)
    assert retried > 0  # 40% of attempts fail at this server: some items were retried
    # The child encodes the spans itself (observability/otlp.py): each request is what
    # the SDK's own encoder makes of the same spans, field for field.
    for request in receiver.requests:
        assert as_the_sdk_encodes(request) == request


def test_output_text_goes_out_only_when_asked_and_as_stored(
    tmp_path: Path,
    receiver: Receiver,
    retrying_server: RunningServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    run_id, db = run_once(tmp_path, retrying_server.openai_base_url)
    with Store(db) as store, store.read() as cur:
        outputs = dict(
            cur.execute(
                "SELECT idempotency_key, output_text FROM results "
                "WHERE run_id = ? AND status = 'succeeded'",
                [run_id],
            ).fetchall()
        )
    shown = {}
    for span in receiver.spans:
        found = attributes(span.attributes)
        if "gen_ai.output.messages" in found:
            shown[found["promptlab.item.key"]] = found["gen_ai.output.messages"]
    assert outputs and set(shown) == set(outputs)
    for key, text in outputs.items():
        assert text in shown[key]


def test_tracing_is_off_unless_a_collector_is_named() -> None:
    assert tracing_from_env({}) is None
    assert tracing_from_env({"OTEL_SERVICE_NAME": "x"}) is None
    on = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}
    assert tracing_from_env({**on, "OTEL_SDK_DISABLED": "true"}) is None
    assert tracing_from_env({**on, "OTEL_TRACES_EXPORTER": "none"}) is None
    tracing = tracing_from_env(on)
    assert tracing is not None
    tracing.shutdown()
