"""Runs as OpenTelemetry traces over OTLP/HTTP, with the GenAI semantic conventions.

On when the standard variables name a collector (`OTEL_EXPORTER_OTLP_ENDPOINT` or
`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`; `OTEL_SDK_DISABLED=true` or
`OTEL_TRACES_EXPORTER=none` turn it off); the SDK's exporter reads the rest of them
(headers, timeout, `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`).

The shape: every run is one trace, its trace id the first 16 bytes of sha256(run id),
so a resumed run's spans join the same trace. The run is a span; each item a child
span whose span id is the first 8 bytes of sha256(item key) (the audit trail's trace
id for that item, so one id finds both); each attempt a child of its item. The engine
hands each item's recorded rows (their own start and end times) to the SDK's batch
processor (spans.py); a child process makes the spans from them, encodes and exports
them (offload.py, otlp.py), off the engine's loop and out of its interpreter.

Prompt and output text go out only when
`OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`, and then masked as stored
outputs are (PROMPTLAB_MASK) with API keys redacted.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from promptlab.observability.spans import Tracing


def trace_id_of(run_id: str) -> int:
    """A run's trace id: the first 16 bytes of sha256(run id)."""
    return int.from_bytes(hashlib.sha256(run_id.encode()).digest()[:16], "big")


def span_id_bytes(item_key: str) -> bytes:
    """An item's span id as OTLP carries it: the first 8 bytes of sha256(item key)."""
    return hashlib.sha256(item_key.encode()).digest()[:8]


def span_id_of(item_key: str) -> int:
    """An item's span id: the first 8 bytes of sha256(item key)."""
    return int.from_bytes(span_id_bytes(item_key), "big")


def tracing_on(environ: Mapping[str, str]) -> bool:
    """Whether the standard variables name a collector and nothing turns tracing off."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if environ.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
        return False
    return bool(
        environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
        or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
    )


def tracing_from_env(environ: Mapping[str, str]) -> Tracing | None:
    """The process's tracing when the environment names a collector, else None (and the
    OpenTelemetry SDK is not even imported)."""
    if not tracing_on(environ):
        return None
    from promptlab.observability.spans import Tracing

    return Tracing(environ)
