"""`promptlab batch` takes the request files people have (issue 23, item 5): bare chat
bodies, a dotted id, the chat fields the API accepts, an endpoint from the command line
that a resume in a fresh shell finds again, and the output file written again."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from promptlab.cli import main
from promptlab.engine import parse_spec_text
from promptlab.errors import SpecError
from promptlab.fakellm.server import RunningServer
from tests.fakellm_fixtures import ServerFactory

KEY = "sk-batch-test-key-0123456789abcdef"
HI = [{"role": "user", "content": "Say hi."}]


def _write(path: Path, lines: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def _batch(*args: str, env: dict[str, str] | None = None) -> Any:
    return CliRunner().invoke(main, ["batch", *args], env=env)


def _bodies(server: RunningServer) -> list[dict[str, Any]]:
    return [r["body"] for r in server.requests()]


def test_bare_chat_bodies_with_their_id_run_against_a_base_url_without_a_providers_file(
    tmp_path: Path, db_path: Path, fakellm_factory: ServerFactory
) -> None:
    server = fakellm_factory()
    extras = {
        "metadata": {"team": "search"},
        "user": "user-1",
        "store": False,
        "seed": 7,
        "stop": ["END"],
        "response_format": {"type": "json_object"},
        "n": 1,
    }
    requests = _write(
        tmp_path / "bodies.jsonl",
        [
            {"custom_id": f"q{i}", "model": "gpt-4o-mini", "messages": HI, **extras}
            for i in range(5)
        ],
    )
    out = tmp_path / "out.jsonl"
    result = _batch(
        str(requests),
        "--base-url",
        server.openai_base_url,
        "--rpm",
        "600",
        "--concurrency",
        "2",
        "-o",
        str(out),
        "--quiet",
    )
    assert result.exit_code == 0, result.output + result.stderr
    sent = _bodies(server)
    assert len(sent) == 5
    for body in sent:  # as written: every accepted field, and not the line's own id
        assert {k: body[k] for k in extras if k != "n"} == {
            k: v for k, v in extras.items() if k != "n"
        }
        assert "custom_id" not in body
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [line["custom_id"] for line in lines] == [f"q{i}" for i in range(5)]
    assert server.stats()["max_in_flight"] <= 2
    run_id = result.output.split()[1]
    # The id is on the last line too, where the user's eyes are at the end.
    assert run_id in result.output.strip().splitlines()[-1]


def test_a_nested_id_is_named_by_a_dotted_path_and_its_metadata_is_sent(
    tmp_path: Path, db_path: Path, fakellm_factory: ServerFactory
) -> None:
    server = fakellm_factory()
    requests = _write(
        tmp_path / "nested.jsonl",
        [
            {"model": "m", "messages": HI, "metadata": {"id": f"n-{i}", "src": "crm"}}
            for i in range(3)
        ],
    )
    out = tmp_path / "out.jsonl"
    result = _batch(
        str(requests),
        "--base-url",
        server.openai_base_url,
        "--id-field",
        "metadata.id",
        "-o",
        str(out),
        "--quiet",
    )
    assert result.exit_code == 0, result.output + result.stderr
    assert [b["metadata"]["id"] for b in _bodies(server)] == ["n-0", "n-1", "n-2"]
    assert [json.loads(x)["custom_id"] for x in out.read_text().splitlines()] == [
        "n-0",
        "n-1",
        "n-2",
    ]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (
            {"custom_id": "a", "messages": HI, "tools": []},
            "line 1: body fields not supported: tools (supported: frequency_penalty,",
        ),
        (
            {"custom_id": "a", "messages": HI, "n": 3},
            "line 1: n: only 1 answer per request is supported, got 3",
        ),
        ({"messages": HI, "metadata": {"other": 1}}, "line 1: 'metadata.id' must be a non-empty"),
    ],
)
def test_what_cannot_be_sent_is_refused_with_its_line(
    tmp_path: Path, db_path: Path, fakellm: RunningServer, line: dict[str, Any], message: str
) -> None:
    fakellm.reset()
    requests = _write(tmp_path / "bad.jsonl", [line])
    id_field = "metadata.id" if "metadata" in line else "custom_id"
    result = _batch(
        str(requests), "--base-url", fakellm.openai_base_url, "--model", "m", "--id-field", id_field
    )
    assert result.exit_code == 2
    assert message in result.stderr
    assert fakellm.stats()["attempts"] == 0


def test_an_anthropic_endpoint_refuses_chat_fields_it_has_no_form_for(
    tmp_path: Path, db_path: Path, fakellm: RunningServer
) -> None:
    requests = _write(
        tmp_path / "a.jsonl",
        [
            {"custom_id": "a", "messages": HI, "stop": "X"},
            {"custom_id": "b", "messages": HI, "response_format": {"type": "json_object"}},
        ],
    )
    result = _batch(
        str(requests),
        "--endpoint",
        "claude",
        "--kind",
        "anthropic",
        "--base-url",
        fakellm.anthropic_base_url,
        "--model",
        "claude-haiku-4-5",
    )
    assert result.exit_code == 2, result.output
    assert (
        "line 2: claude:claude-haiku-4-5 is an Anthropic endpoint: it cannot take "
        "response_format (of a chat body's fields it takes stop, user)"
    ) in result.stderr


def test_a_run_remembers_its_endpoint_so_resume_needs_only_the_key(
    tmp_path: Path, db_path: Path, fakellm_factory: ServerFactory
) -> None:
    server = fakellm_factory(api_key=KEY)
    requests = _write(
        tmp_path / "r.jsonl", [{"custom_id": f"r{i}", "messages": HI} for i in range(4)]
    )
    # A stale key: the server answers 401, the run stops, nothing answered.
    first = _batch(
        str(requests),
        "--base-url",
        server.openai_base_url,
        "--model",
        "m",
        "--api-key-env",
        "MY_BATCH_KEY",
        "--quiet",
        env={"MY_BATCH_KEY": "sk-stale-key-0000000000000000"},
    )
    assert first.exit_code != 0
    run_id = first.output.split()[1]
    assert f"promptlab resume {run_id}" in first.output
    # A fresh shell: only the key is set; no providers file, no flags.
    out = tmp_path / "out.jsonl"
    resumed = CliRunner().invoke(
        main, ["resume", run_id, "--quiet", "-o", str(out)], env={"MY_BATCH_KEY": KEY}
    )
    assert resumed.exit_code == 0, resumed.output + resumed.stderr
    assert len(out.read_text().splitlines()) == 4
    assert server.stats()["successes"] == 4
    assert KEY.encode() not in db_path.read_bytes()


def test_the_output_file_is_written_again_for_a_finished_run(
    tmp_path: Path, db_path: Path, fakellm: RunningServer
) -> None:
    requests = _write(
        tmp_path / "r.jsonl", [{"custom_id": f"r{i}", "messages": HI} for i in range(3)]
    )
    result = _batch(str(requests), "--base-url", fakellm.openai_base_url, "--model", "m", "--quiet")
    assert result.exit_code == 0
    run_id = result.output.split()[1]
    assert f"promptlab batch-output {run_id} -o FILE" in result.output
    out = tmp_path / "again.jsonl"
    again = CliRunner().invoke(main, ["batch-output", run_id, "-o", str(out)])
    assert again.exit_code == 0, again.output + again.stderr
    assert f"wrote 3 results of run {run_id}" in again.output
    assert [json.loads(x)["response"]["status_code"] for x in out.read_text().splitlines()] == [
        200
    ] * 3


def test_a_pasted_spec_cannot_bring_its_own_endpoints_with_keys(tmp_path: Path) -> None:
    text = (
        "name: sneaky\ndataset: x.jsonl\n"
        "variants: [{name: v, requests: as_written, model: 'x:m'}]\n"
        "local_endpoints: {x: {kind: openai, base_url: 'http://198.51.100.7/v1', "
        "api_key_env: OPENAI_API_KEY}}\n"
    )
    (tmp_path / "x.jsonl").write_text("")
    with pytest.raises(SpecError, match="unknown field"):
        parse_spec_text(text, base_dir=tmp_path)
