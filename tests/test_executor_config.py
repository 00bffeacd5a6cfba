"""Where a run's calls are made (issue 25): `executor:` in a spec, and `executor:` and
`queue:` per endpoint in the providers file, checked in one line each."""

from __future__ import annotations

from pathlib import Path

import pytest

from promptlab.distributed.wire import (
    answer_from_dict,
    answer_to_dict,
    endpoint_from_dict,
    endpoint_to_dict,
    request_from_dict,
    request_to_dict,
)
from promptlab.engine.spec.runspec import parse_spec
from promptlab.errors import ConfigError, ErrorKind, ProviderError, SpecError
from promptlab.providers.base import CompletionRequest, CompletionResponse, FinishReason
from promptlab.providers.config import load_endpoints

SPEC = {
    "dataset": "rows.csv",
    "variants": [{"messages": [{"role": "user", "content": "hi"}], "model": "sim:fast"}],
}


def test_a_spec_says_where_its_calls_are_made(tmp_path: Path) -> None:
    (tmp_path / "rows.csv").write_text("a\n1\n")
    spec = parse_spec({**SPEC, "executor": "celery"}, base_dir=tmp_path)
    assert spec.executor == "celery" and spec.raw["executor"] == "celery"
    assert parse_spec(SPEC, base_dir=tmp_path).executor is None
    refused = "executor: one of local, celery, provider-batch, got 'spark'"
    with pytest.raises(SpecError, match=refused):
        parse_spec({**SPEC, "executor": "spark"}, base_dir=tmp_path)


def test_the_providers_file_sets_an_endpoint_s_executor_and_queue(tmp_path: Path) -> None:
    path = tmp_path / "providers.yaml"
    path.write_text(
        "endpoints:\n  openai: {executor: celery, queue: openai}\n  anthropic: {queue: null}\n"
    )
    endpoints = load_endpoints(path)
    assert (endpoints["openai"].executor, endpoints["openai"].queue) == ("celery", "openai")
    assert (endpoints["anthropic"].executor, endpoints["anthropic"].queue) == ("local", None)
    path.write_text("endpoints:\n  openai: {executor: threads}\n")
    with pytest.raises(ConfigError, match="executor must be one of local, celery"):
        load_endpoints(path)


def test_what_crosses_redis_comes_back_the_same() -> None:
    cfg = load_endpoints(None)["openai"]
    assert endpoint_from_dict(endpoint_to_dict(cfg)) == cfg
    assert "api_key" not in endpoint_to_dict(cfg)  # the variable's name only
    request = CompletionRequest(
        model="m",
        messages=({"role": "user", "content": "x"},),
        temperature=0.2,
        extra={"stop": ["\\n"]},
        request_id="k",
        attempt=3,
    )
    assert request_from_dict(request_to_dict(request)) == request
    response = CompletionResponse("out", 3, 4, FinishReason.STOP, "m-1", 12.5, {"a": "b"}, "r")
    assert answer_from_dict(answer_to_dict(response, None)) == response
    error = ProviderError(
        ErrorKind.RATE_LIMIT,
        "slow down",
        status=429,
        provider="openai",
        retry_after_s=1.5,
        headers={"retry-after": "2"},
    )
    back = answer_from_dict(answer_to_dict(None, error))
    assert isinstance(back, ProviderError)
    assert (back.kind, back.status, back.retry_after_s, str(back)) == (
        error.kind,
        429,
        1.5,
        str(error),
    )
