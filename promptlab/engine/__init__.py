"""The shared async executor: rate limits, retries, durable runs that resume after a crash."""

from promptlab.engine.executor import Engine, EngineError, new_run_id
from promptlab.engine.record.progress import RunProgress
from promptlab.engine.send.limiter import EndpointLimiter, LimiterState, Limits, TokenBucket
from promptlab.engine.send.retry import Action, RetryPolicy, classify
from promptlab.engine.spec.runspec import (
    RunSpec,
    SpecError,
    VariantSpec,
    load_spec,
    parse_spec,
    parse_spec_text,
)

__all__ = [
    "Action",
    "EndpointLimiter",
    "Engine",
    "EngineError",
    "LimiterState",
    "Limits",
    "RetryPolicy",
    "RunProgress",
    "RunSpec",
    "SpecError",
    "TokenBucket",
    "VariantSpec",
    "classify",
    "load_spec",
    "new_run_id",
    "parse_spec",
    "parse_spec_text",
]
