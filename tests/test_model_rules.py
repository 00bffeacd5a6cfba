"""Models' sampling rules: what a model refuses is refused at submit, and a template
default it does not take is not sent (issue 23, item 4)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from promptlab.engine import Engine, parse_spec
from promptlab.errors import ConfigError, SpecError
from promptlab.fakellm.server import RunningServer
from promptlab.providers.config import builtin_endpoints, load_endpoints, sampling_rule
from promptlab.store import Store
from tests.fakellm_fixtures import ServerFactory

ROWS = 6


def _dataset(tmp_path: Path) -> Path:
    path = tmp_path / "rows.csv"
    path.write_text("text,t\n" + "".join(f"row {i},0.{i}\n" for i in range(ROWS)))
    return path


def _spec(tmp_path: Path, server: RunningServer, model: str, **variant: Any) -> dict[str, Any]:
    return {
        "name": "rules",
        "dataset": str(_dataset(tmp_path)),
        "variants": [
            {
                "name": "v",
                "messages": [{"role": "user", "content": "Summarize: {{ text }}"}],
                "model": f"claude:{model}",
                **variant,
            }
        ],
        "endpoints": {"claude": {"kind": "anthropic", "base_url": server.anthropic_base_url}},
    }


def _run(store: Store, spec: dict[str, Any]) -> Any:
    with Engine(store) as engine:
        return engine.wait(engine.submit(parse_spec(spec)), 60)


def test_a_template_with_its_defaults_runs_on_a_model_that_takes_one_of_them(
    store: Store, tmp_path: Path, fakellm_factory: ServerFactory
) -> None:
    # Every template carries temperature 0.7 and top_p 1.0; Sonnet 4.5 answers 400 to
    # both together, so before the rule every item of such a run failed.
    server = fakellm_factory()
    final = _run(store, _spec(tmp_path, server, "claude-sonnet-4-5"))
    assert (final.status, final.succeeded) == ("completed", ROWS)
    bodies = [r["body"] for r in server.requests()]
    assert all(b["temperature"] == 0.7 and "top_p" not in b for b in bodies)


def test_a_chosen_top_p_is_sent_alone(
    store: Store, tmp_path: Path, fakellm_factory: ServerFactory
) -> None:
    server = fakellm_factory()
    final = _run(store, _spec(tmp_path, server, "claude-haiku-4-5", params={"top_p": 0.9}))
    assert final.succeeded == ROWS
    assert all(
        b.get("top_p") == 0.9 and "temperature" not in b
        for b in (r["body"] for r in server.requests())
    )


def test_a_model_that_takes_neither_is_sent_neither(
    store: Store, tmp_path: Path, fakellm_factory: ServerFactory
) -> None:
    server = fakellm_factory()
    final = _run(store, _spec(tmp_path, server, "claude-opus-4-7"))
    assert final.succeeded == ROWS
    bodies = [r["body"] for r in server.requests()]
    assert not any("temperature" in b or "top_p" in b for b in bodies)


@pytest.mark.parametrize(
    ("model", "variant", "message"),
    [
        (
            "claude-sonnet-4-5",
            {"params": {"temperature": 0.2, "top_p": 0.9}},
            "variants[0] (v): claude:claude-sonnet-4-5 takes temperature or top_p, not both "
            "(temperature 0.2, top_p 0.9); drop one",
        ),
        (
            "claude-sonnet-4-5-20250929",  # a dated version has its model's rule
            {"params": {"top_p": 0.5}, "params_from": {"temperature": "t"}},
            "takes temperature or top_p, not both (temperature from column t, top_p 0.5)",
        ),
        (
            "claude-opus-4-7",
            {"params": {"temperature": 0.2}},
            "claude:claude-opus-4-7 takes neither temperature nor top_p (temperature 0.2); "
            "remove them",
        ),
        (
            "claude-fable",
            {
                "sampling": {
                    "strategy": "cosine",
                    "param": "temperature",
                    "base": 0.5,
                    "amplitude": 0.2,
                }
            },
            "takes neither temperature nor top_p (temperature from a cosine schedule)",
        ),
    ],
)
def test_what_the_model_refuses_is_refused_at_submit(
    store: Store,
    tmp_path: Path,
    fakellm: RunningServer,
    model: str,
    variant: dict[str, Any],
    message: str,
) -> None:
    fakellm.reset()
    with Engine(store) as engine, pytest.raises(SpecError) as refused:
        engine.submit(parse_spec(_spec(tmp_path, fakellm, model, **variant)))
    assert message in str(refused.value)
    assert fakellm.stats()["attempts"] == 0
    with store.read() as cur:
        assert cur.execute("SELECT count(*) FROM runs").fetchone() == (0,)


def test_a_request_line_asking_both_is_refused_with_its_line_number(
    store: Store, tmp_path: Path, fakellm: RunningServer
) -> None:
    lines = tmp_path / "requests.jsonl"
    hi = [{"role": "user", "content": "hi"}]
    bodies = [
        {"custom_id": "a", "body": {"messages": hi, "temperature": 0.7}},
        {"custom_id": "b", "body": {"messages": hi, "top_p": 1.0, "temperature": 0.7}},
    ]
    lines.write_text("".join(json.dumps(b) + "\n" for b in bodies))
    spec = {
        "name": "lines",
        "dataset": str(lines),
        "variants": [
            {"name": "as-is", "requests": "as_written", "model": "claude:claude-sonnet-4-5"}
        ],
        "endpoints": {"claude": {"kind": "anthropic", "base_url": fakellm.anthropic_base_url}},
    }
    with Engine(store) as engine, pytest.raises(SpecError) as refused:
        engine.submit(parse_spec(spec))
    assert f"{lines}, line 2: claude:claude-sonnet-4-5 takes temperature or top_p" in str(
        refused.value
    )


def test_the_providers_file_states_a_model_s_rule(tmp_path: Path) -> None:
    path = tmp_path / "providers.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "endpoints": {
                    "vllm": {
                        "kind": "openai",
                        "base_url": "http://127.0.0.1:8000/v1",
                        "models": {"my-reasoner": {"sampling": "none"}},
                    },
                    "anthropic": {"models": {"claude-sonnet-4-5": {"sampling": "any"}}},
                }
            }
        )
    )
    endpoints = load_endpoints(path)
    assert sampling_rule(endpoints["vllm"], "my-reasoner-v2") == "none"
    assert sampling_rule(endpoints["anthropic"], "claude-sonnet-4-5") == "any"
    assert sampling_rule(endpoints["anthropic"], "claude-haiku-4-5") == "one"
    assert sampling_rule(builtin_endpoints()["openai"], "o3-mini") == "none"
    assert sampling_rule(builtin_endpoints()["openai"], "gpt-4o-mini") == "any"
    path.write_text(
        yaml.safe_dump(
            {"endpoints": {"x": {"kind": "openai", "models": {"m": {"sampling": "some"}}}}}
        )
    )
    with pytest.raises(ConfigError, match="model 'm': sampling must be one of any, one, none"):
        load_endpoints(path)
