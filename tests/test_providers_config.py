"""Endpoints: built-ins, the providers file, model refs, prices and key handling."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from promptlab.engine import parse_spec
from promptlab.errors import ConfigError, SpecError
from promptlab.providers import build_provider, cost_usd, load_endpoints, parse_model_ref
from promptlab.providers.config import ANY_MODEL, ModelPrice, price_for

ROOT = Path(__file__).resolve().parent.parent


def test_builtins_exist_without_a_file() -> None:
    endpoints = load_endpoints(None)
    assert set(endpoints) >= {"sim", "openai", "anthropic", "local"}
    assert endpoints["openai"].api_key_env == "OPENAI_API_KEY"
    assert endpoints["anthropic"].api_key_env == "ANTHROPIC_API_KEY"
    assert endpoints["local"].kind == "openai" and endpoints["local"].api_key_env is None
    assert endpoints["sim"].api_key_env is None


def test_openai_base_url_comes_from_the_environment() -> None:
    endpoints = load_endpoints(None, environ={"OPENAI_BASE_URL": "http://127.0.0.1:8000/v1"})
    assert endpoints["openai"].base_url == "http://127.0.0.1:8000/v1"
    assert load_endpoints(None, environ={})["openai"].base_url is None


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        ("openai:gpt-4o-mini", ("openai", "gpt-4o-mini")),
        ("sim:careful", ("sim", "careful")),
        ("local:llama3.1:8b", ("local", "llama3.1:8b")),
    ],
)
def test_parse_model_ref(ref: str, expected: tuple[str, str]) -> None:
    assert parse_model_ref(ref) == expected


@pytest.mark.parametrize("ref", ["gpt-4o-mini", ":x", "openai:", ""])
def test_bad_model_ref_names_itself(ref: str) -> None:
    with pytest.raises(ConfigError, match="endpoint:model"):
        parse_model_ref(ref)


def test_file_adds_and_overrides(tmp_path: Path) -> None:
    path = tmp_path / "providers.yaml"
    path.write_text(
        """
endpoints:
  openai:
    rpm: 30
    models:
      gpt-4o-mini: {input_per_mtok: 0.2}
  vllm:
    kind: openai
    base_url: http://127.0.0.1:8000/v1
    models:
      qwen2.5: {context_window: 32768}
""",
        encoding="utf-8",
    )
    endpoints = load_endpoints(path, environ={})
    assert endpoints["openai"].rpm == 30
    assert endpoints["openai"].tpm == 200_000  # untouched fields keep their default
    assert price_for(endpoints["openai"], "gpt-4o-mini") == ModelPrice(0.2, 0.60)
    assert endpoints["vllm"].context_windows == {"qwen2.5": 32768}
    assert endpoints["vllm"].api_key_env is None


def test_example_file_loads() -> None:
    endpoints = load_endpoints(ROOT / "data" / "providers.example.yaml", environ={})
    assert endpoints["local"].prices[ANY_MODEL] == ModelPrice(0.0, 0.0)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("endpoints: {x: {kind: grpc}}", "kind must be one of"),
        ("endpoints: {x: {kind: openai, api_key: sk-123}}", "environment variable|env var"),
        ("endpoints: {x: {kind: openai, rpm: -1}}", "positive integer"),
        ("endpoints: {x: {kind: openai, colour: red}}", "unknown field"),
        ("endpoints: {x: {kind: openai, transport: grpc}}", "transport must be one of http, sdk"),
        ("endpoints: {x: {kind: sim, models: {a: {input_per_mtok: -2}}}}", "non-negative"),
        ("endpoints: [1, 2]", "'endpoints'"),
        ("endpoints: {x: [", "not valid YAML"),
    ],
)
def test_bad_files_name_the_problem(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "providers.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError, match=message):
        load_endpoints(path, environ={})


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_endpoints(tmp_path / "nope.yaml")


@pytest.mark.parametrize(
    ("endpoint", "model", "tokens", "expected"),
    [
        ("openai", "gpt-4o-mini", (1_000_000, 1_000_000), 0.75),
        ("openai", "gpt-4o-mini-2024-07-18", (2_000_000, 0), 0.30),  # dated version: prefix
        ("local", "llama3.1", (5_000_000, 5_000_000), 0.0),
        ("openai", "some-unpriced-model", (1_000, 1_000), 0.0),
    ],
)
def test_cost_usd(endpoint: str, model: str, tokens: tuple[int, int], expected: float) -> None:
    cfg = load_endpoints(None, environ={})[endpoint]
    assert cost_usd(cfg, model, *tokens) == pytest.approx(expected)


def test_missing_key_names_the_env_var() -> None:
    cfg = load_endpoints(None, environ={})["anthropic"]
    with pytest.raises(ConfigError, match="ANTHROPIC_API_KEY"):
        build_provider(cfg, environ={})


@pytest.mark.parametrize("endpoint", ["openai", "anthropic", "local"])
def test_key_never_shows_in_repr(endpoint: str) -> None:
    secret = "sk-very-secret-123"
    cfg = load_endpoints(None, environ={})[endpoint]
    provider = build_provider(cfg, environ={"OPENAI_API_KEY": secret, "ANTHROPIC_API_KEY": secret})
    assert secret not in repr(provider)
    assert secret not in repr(cfg)
    assert all(
        secret not in repr(v)
        for v in vars(provider).values()
        if not callable(v) and not hasattr(v, "api_key")
    )


def test_endpoints_can_key_a_dict() -> None:
    endpoints = load_endpoints(None, environ={})
    budgets = {endpoints["openai"]: 1, endpoints["sim"]: 2}
    assert budgets[load_endpoints(None, environ={})["openai"]] == 1


def test_transport_defaults_to_http_and_the_file_can_choose_the_sdk(tmp_path: Path) -> None:
    path = tmp_path / "providers.yaml"
    path.write_text("endpoints: {anthropic: {transport: sdk}, vllm: {kind: openai}}\n")
    endpoints = load_endpoints(path, environ={})
    assert endpoints["anthropic"].transport == "sdk"
    assert endpoints["anthropic"].rpm == 50  # the other built-in fields are kept
    assert endpoints["openai"].transport == endpoints["vllm"].transport == "http"


@pytest.mark.parametrize(
    ("kind", "transport", "cls"),
    [
        ("openai", "http", "OpenAIHttpProvider"),
        ("anthropic", "http", "AnthropicHttpProvider"),
        ("openai", "sdk", "OpenAIProvider"),
        ("anthropic", "sdk", "AnthropicProvider"),
    ],
)
def test_build_provider_picks_the_transport(kind: str, transport: str, cls: str) -> None:
    cfg = replace(load_endpoints(None, environ={})[kind], transport=transport)
    provider = build_provider(cfg, environ={"OPENAI_API_KEY": "k", "ANTHROPIC_API_KEY": "k"})
    assert type(provider).__name__ == cls


def test_a_run_spec_cannot_choose_the_transport(tmp_path: Path) -> None:
    dataset = tmp_path / "d.jsonl"
    dataset.write_text('{"q": "x"}\n')
    spec = {
        "dataset": str(dataset),
        "variants": [{"messages": [{"role": "user", "content": "{{q}}"}], "model": "x:m"}],
        "endpoints": {
            "x": {"kind": "openai", "base_url": "http://127.0.0.1:9/v1", "transport": "sdk"}
        },
    }
    with pytest.raises(SpecError, match="allowed keys are"):
        parse_spec(spec)
