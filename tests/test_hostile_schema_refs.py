"""No schema reaches the network: a `$ref` (or `$dynamicRef`, or one made remote by an
`$id`) outside the document is refused when saved or submitted, with the reference's path,
and validators never fetch, so a schema stored before the check cannot either.

A capture server on 127.0.0.1 stands for the host a hostile schema names: it must see
no request at all."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from promptlab.checks.validation import Checker, CheckStatus, check_output
from promptlab.cli import main
from promptlab.engine import parse_spec
from promptlab.errors import SpecError, TemplateError
from promptlab.prompts.registry import Registry
from promptlab.prompts.templates import Template
from promptlab.workbench import Workbench


class Capture:
    """A loopback HTTP server that answers every GET with a schema and records it."""

    def __init__(self) -> None:
        self.paths: list[str] = []
        capture = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the http.server hook's name
                capture.paths.append(self.path)
                body = json.dumps({"type": "string"}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def schemas(self) -> list[tuple[dict[str, Any], str]]:
        """(a schema reaching for this server, the path after the root its refusal names)."""
        url = self.url
        return [
            ({"properties": {"a": {"$ref": f"{url}/a.json"}}}, '.properties.a["$ref"]'),
            ({"$ref": f"{url}/root.json"}, '["$ref"]'),
            ({"items": {"$dynamicRef": f"{url}/d.json#x"}}, '.items["$dynamicRef"]'),
            (  # relative, but to a remote `$id`
                {"$id": f"{url}/root.json", "properties": {"b": {"$ref": "other.json"}}},
                '.properties.b["$ref"]',
            ),
            ({"$defs": {"x": {"$ref": f"{url}/x.json"}}}, '["$defs"].x["$ref"]'),
            (  # a property named like a data keyword is still a schema
                {"properties": {"enum": {"$ref": f"{url}/e.json"}}},
                '.properties.enum["$ref"]',
            ),
        ]


@pytest.fixture
def capture() -> Iterator[Capture]:
    server = Capture()
    thread = threading.Thread(
        target=server.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    try:
        yield server
    finally:
        server.server.shutdown()
        server.server.server_close()


@pytest.mark.parametrize("case", range(6))
def test_validate_schema_with_an_outside_reference_is_refused_and_fetches_nothing(
    tmp_path: Path, capture: Capture, case: int
) -> None:
    schema, where = capture.schemas()[case]
    schema_file = tmp_path / "schema.json"
    schema_file.write_text(json.dumps(schema))
    outputs = tmp_path / "outputs.jsonl"
    outputs.write_text(json.dumps({"output": '{"a": 1, "b": 2}'}) + "\n")
    result = CliRunner().invoke(main, ["validate", "--schema", str(schema_file), str(outputs)])
    assert result.exit_code == 1
    assert result.stderr.startswith(f"error: schema {schema_file}{where}: '"), result.stderr
    assert "refers outside the schema" in result.stderr
    assert capture.paths == []


@pytest.mark.parametrize("case", range(6))
def test_a_spec_or_a_saved_prompt_with_one_is_refused(
    tmp_path: Path, capture: Capture, registry: Registry, case: int, db_path: Path
) -> None:
    schema, where = capture.schemas()[case]
    dataset = tmp_path / "rows.jsonl"
    dataset.write_text('{"x": "hello"}\n')
    spec = parse_spec(
        {
            "name": "hostile",
            "dataset": str(dataset),
            "variants": [
                {
                    "name": "v",
                    "messages": [{"role": "user", "content": "{{ x }}"}],
                    "model": "sim:fast",
                    "output_schema": schema,
                }
            ],
        }
    )
    with Workbench.open() as wb, pytest.raises(SpecError) as caught:
        wb.runs.start(spec)
    assert str(caught.value).startswith(f"variants[0] (v): output_schema{where}: "), caught.value
    with pytest.raises(TemplateError, match=r"^output_schema.*refers outside the schema"):
        registry.save_version(
            "p",
            Template.build([{"role": "user", "content": "{{ x }}"}], output_schema=schema),
            author="a",
        )
    with pytest.raises(TemplateError, match=r"^variables\.x.*refers outside the schema"):
        Template.build([{"role": "user", "content": "{{ x }}"}], variables={"x": schema})
    assert capture.paths == []


def test_a_stored_schema_from_before_the_check_never_fetches(capture: Capture) -> None:
    # Checker is what a run builds for a stored version's schema, checked or not.
    for schema, _ in capture.schemas():
        check = Checker(schema).check('{"a": 1, "b": 2}')
        assert check.status is CheckStatus.INVALID
        assert check.errors[0].startswith("$: the output schema cannot be used: output_schema")
        assert check_output('"x"', schema).status is CheckStatus.INVALID
    assert capture.paths == []


def test_references_inside_the_document_still_resolve() -> None:
    schema = {
        "$id": "https://example.invalid/root.json",
        "$defs": {"price": {"type": "number", "minimum": 0}, "n": {"$anchor": "n"}},
        "type": "object",
        "properties": {"price": {"$ref": "#/$defs/price"}, "n": {"$ref": "#n"}},
    }
    checker = Checker(schema)
    assert checker.refused is None
    assert checker.check('{"price": 3}').status is CheckStatus.VALID
    assert checker.check('{"price": -1}').errors == ("$.price: -1 is less than the minimum of 0",)
