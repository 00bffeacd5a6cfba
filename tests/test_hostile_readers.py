"""Every reader of a user's file is bounded: a line's length and the file's size are
capped (a device, a FIFO that never ends, a sparse file of gigabytes), and what is not
JSON (NaN, Infinity) or not UTF-8 is refused with one line naming the file and line."""

from __future__ import annotations

import io
import json
import os
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from promptlab.cli import main
from promptlab.config import DEMO_DIR
from promptlab.errors import SpecError

KIB, MIB, GIB = 2**10, 2**20, 2**30
REQUEST = {"custom_id": "a", "body": {"messages": [{"role": "user", "content": "hi"}]}}
EXPOSURE = {
    "experiment": "x",
    "revision": 1,
    "unit": "u",
    "variant": "control",
    "bucket": 1,
    "prompt_version_id": "sha256:0",
    "time": "2026-01-01T00:00:00+00:00",
}
FEEDBACK = {"version": "ticket-triage@1.0.0", "unit_id": "u", "kind": "click"}


def cli(*args: str, input: bytes | None = None) -> Result:
    return CliRunner().invoke(main, list(args), input=input)


def refused(result: Result, message: str, code: int = 1) -> None:
    """One line on stderr, a non-zero exit, no traceback."""
    assert isinstance(result.exception, SystemExit), result.exception
    assert (result.exit_code, result.stderr) == (code, f"error: {message}\n")


def write(path: Path, *lines: str) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def sparse(path: Path, size: int) -> Path:
    """A file of `size` bytes that takes no room on disk (all NUL, one 'line')."""
    with path.open("wb") as handle:
        handle.truncate(size)
    return path


@pytest.fixture
def schema(tmp_path: Path) -> Path:
    path = tmp_path / "schema.json"
    path.write_text('{"type": "object"}', encoding="utf-8")
    return path


@pytest.fixture
def demo_prompt() -> None:
    assert cli("prompt", "add", str(DEMO_DIR / "ticket-triage.yaml")).exit_code == 0


# ---- a device that never ends: cut at the line limit ---------------------------------

# Each reader given `{zero}` (a link to /dev/zero), and what it says.
DEV_ZERO = [
    (
        ["prompt", "render", "ticket-triage", "--vars-file", "{zero}"],
        1,
        "{zero}, line 1: past 10,485,760 bytes, the most a vars file may have",
    ),
    (
        ["validate", "--schema", "{schema}", "{zero}"],
        1,
        "outputs {zero}, line 1: longer than 4,194,304 bytes, the most a line of an outputs file "
        "may have",
    ),
    (
        ["exposures", "import", "{zero}"],
        1,
        "exposures {zero}, line 1: longer than 65,536 bytes, the most a line of an exposure log "
        "may have",
    ),
    (
        ["assign", "any", "--units", "{zero}"],
        1,
        "units {zero}, line 1: longer than 65,536 bytes, the most a line of a units file may have",
    ),
    (
        ["batch", "{zero}", "--endpoint", "sim"],
        2,  # the model from the first line
        "dataset {zero}, line 1: longer than 4,194,304 bytes, the most a line of a dataset file "
        "may have",
    ),
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("command", "code", "message"), DEV_ZERO)
def test_a_device_that_never_ends_is_cut_at_the_line_limit(
    tmp_path: Path, schema: Path, demo_prompt: None, command: list[str], code: int, message: str
) -> None:
    zero = tmp_path / "zero.jsonl"
    zero.symlink_to("/dev/zero")
    args = [arg.format(zero=zero, schema=schema) for arg in command]
    refused(cli(*args), message.format(zero=zero), code)


@pytest.mark.timeout(60)
def test_a_fifo_that_never_ends_is_cut_at_the_file_limit(tmp_path: Path) -> None:
    fifo = tmp_path / "units"
    os.mkfifo(fifo)

    def feed() -> None:  # lines of legal length, without end
        line = b"u" * 65_000 + b"\n"
        try:
            with fifo.open("wb") as handle:
                while True:
                    handle.write(line)
        except OSError:  # the reader gave up: a broken pipe
            pass

    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    try:
        result = cli("assign", "any", "--units", str(fifo))
    finally:  # a writer still waiting for a reader is let go
        os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))
    refused(
        result,
        f"units {fifo}, line 1033: past 67,108,864 bytes, the most a units file may have",
    )
    writer.join(10)
    assert not writer.is_alive()


# ---- a regular file over the size limit: refused before reading ----------------------


# Each reader given `{path}` (a sparse file one byte over its limit), and how it names it.
HUGE = [
    (
        "vars.json",
        10 * MIB,
        ["prompt", "render", "ticket-triage", "--vars-file", "{path}"],
        1,
        "{path}",
        "a vars file",
    ),
    (
        "outputs.jsonl",
        GIB,
        ["validate", "--schema", "{schema}", "{path}"],
        1,
        "outputs {path}",
        "an outputs file",
    ),
    (
        "exposures.jsonl",
        GIB,
        ["exposures", "import", "{path}"],
        1,
        "exposures {path}",
        "an exposure log",
    ),
    (
        "units.txt",
        64 * MIB,
        ["assign", "any", "--units", "{path}"],
        1,
        "units {path}",
        "a units file",
    ),
    (
        "requests.jsonl",
        GIB,
        ["batch", "{path}", "--endpoint", "sim", "--model", "fast"],
        2,
        "dataset {path}",
        "a dataset file",
    ),
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("name", "limit", "command", "code", "where", "kind"), HUGE)
def test_a_file_over_its_size_limit_is_refused_before_it_is_read(
    tmp_path: Path,
    schema: Path,
    demo_prompt: None,
    name: str,
    limit: int,
    command: list[str],
    code: int,
    where: str,
    kind: str,
) -> None:
    path = sparse(tmp_path / name, limit + 1)
    args = [arg.format(path=path, schema=schema) for arg in command]
    said = f"{limit + 1:,} bytes, more than the {limit:,} {kind} may have"
    refused(cli(*args), f"{where.format(path=path)}: {said}", code)


TOO_BIG = ": 1,073,741,825 bytes, more than the 1,073,741,824 a dataset file may have"
TOO_LONG = ", line 3: longer than 4,194,304 bytes, the most a line of a dataset file may have"


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("name", "lines", "said"),
    [
        ("rows.jsonl", None, TOO_BIG),  # None: a sparse file of a gigabyte and a byte
        ("rows.csv", None, TOO_BIG),
        ("rows.csv", ("text", "a", "b" * (4 * MIB + 1)), TOO_LONG),
    ],
)
def test_a_run_spec_dataset_file_is_bounded(
    tmp_path: Path, name: str, lines: tuple[str, ...] | None, said: str
) -> None:
    from promptlab.engine.plan.rows import check_dataset

    path = sparse(tmp_path / name, GIB + 1) if lines is None else write(tmp_path / name, *lines)
    with pytest.raises(SpecError) as raised:
        check_dataset(path)
    assert str(raised.value) == f"dataset {path}{said}"


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("args", "what"),
    [
        (["dataset", "import", "--name", "x"], "a dataset"),
        (["feedback", "import"], "a feedback file"),
        (["logs", "import"], "a log file"),
    ],
)
def test_files_duckdb_reads_are_capped_before_it_reads(
    tmp_path: Path, args: list[str], what: str
) -> None:
    # (These held before: the guard keeps them.) A device or FIFO is not read at all.
    link = tmp_path / "zero.jsonl"
    link.symlink_to("/dev/zero")
    refused(cli(*args, str(link)), f"{link}: not a regular file")
    huge = sparse(tmp_path / "huge.jsonl", GIB + 1)
    refused(
        cli(*args, str(huge)),
        f"huge.jsonl: 1,073,741,825 bytes, more than the 1,073,741,824 {what} may have",
    )


# ---- batch: a request is no bigger than a rendered prompt ----------------------------


def request(messages: int, chars: int) -> str:
    content = [{"role": "user", "content": "x" * chars}] * messages
    return json.dumps({"custom_id": "big", "body": {"messages": content}})


@pytest.mark.timeout(60)
def test_batch_refuses_a_request_over_the_rendered_size(tmp_path: Path) -> None:
    path = write(tmp_path / "requests.jsonl", json.dumps(REQUEST), request(6, 199_999))
    result = cli("batch", str(path), "--endpoint", "sim", "--model", "fast")
    refused(
        result,
        f"{path}, line 2: messages hold 1,199,994 characters, more than the 1,000,000 a "
        "request may have",
        code=2,
    )
    assert "no runs" in cli("status").output.lower()


@pytest.mark.timeout(60)
def test_batch_refuses_a_request_line_over_the_line_limit(tmp_path: Path) -> None:
    path = write(tmp_path / "requests.jsonl", json.dumps(REQUEST), request(22, 199_999))
    result = cli("batch", str(path), "--endpoint", "sim", "--model", "fast")
    limit = "longer than 4,194,304 bytes, the most a line of a dataset file may have"
    refused(result, f"dataset {path}, line 2: {limit}", code=2)
    assert "no runs" in cli("status").output.lower()


# ---- NaN and Infinity are not JSON ---------------------------------------------------


NOT_FINITE = [
    ("NaN", "NaN is not JSON (numbers must be finite)"),
    ("-Infinity", "-Infinity is not JSON (numbers must be finite)"),
    ("[1, Infinity]", "Infinity is not JSON (numbers must be finite)"),
    ("1e999", "1e999 is too large for a number"),
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("value", "reason"),
    [
        *NOT_FINITE,
        ("nan", "not valid JSON (Expecting value at column 7)"),
        ("inf", "not valid JSON (Expecting value at column 7)"),
    ],
)
def test_dataset_import_refuses_numbers_json_has_not(
    tmp_path: Path, value: str, reason: str
) -> None:
    path = write(tmp_path / "rows.jsonl", '{"b": 1}', "", f'{{"a": {value}}}')
    refused(cli("dataset", "import", str(path), "--name", "rows"), f"rows.jsonl, line 3: {reason}")
    assert "rows" not in cli("dataset", "list").output


def test_text_that_looks_like_nan_is_text(tmp_path: Path) -> None:
    texts = ["NaN", "x: NaN]", "[1, Infinity}", "1e999", "see, inf]"]
    path = write(tmp_path / "rows.jsonl", *(json.dumps({"a": t}) for t in texts))
    assert cli("dataset", "import", str(path), "--name", "rows").exit_code == 0
    assert cli("dataset", "show", "rows").output.count("{") == len(texts)


@pytest.mark.timeout(60)
def test_feedback_import_refuses_infinity(tmp_path: Path, demo_prompt: None) -> None:
    path = write(
        tmp_path / "fb.jsonl", json.dumps({**FEEDBACK, "x": 1}).replace("1}", "[Infinity]}")
    )
    refused(
        cli("feedback", "import", str(path)),
        "fb.jsonl, line 1: Infinity is not JSON (numbers must be finite)",
    )


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("value", "reason"), NOT_FINITE)
def test_validate_refuses_numbers_json_has_not(
    tmp_path: Path, schema: Path, value: str, reason: str
) -> None:
    path = write(tmp_path / "outputs.jsonl", '"fine"', f'{{"output": "{{}}", "score": {value}}}')
    refused(
        cli("validate", "--schema", str(schema), str(path)), f"outputs {path}, line 2: {reason}"
    )


@pytest.mark.timeout(60)
def test_exposures_import_refuses_nan(tmp_path: Path) -> None:
    path = write(
        tmp_path / "exposures.jsonl", json.dumps({**EXPOSURE, "score": 0}).replace("0}", "NaN}")
    )
    refused(
        cli("exposures", "import", str(path)),
        f"exposures {path}, line 1: NaN is not JSON (numbers must be finite)",
    )


@pytest.mark.timeout(60)
def test_batch_refuses_nan(tmp_path: Path) -> None:
    body = json.dumps({**REQUEST["body"], "temperature": 0}).replace("0}", "NaN}")  # type: ignore[dict-item]
    path = write(tmp_path / "requests.jsonl", f'{{"custom_id": "a", "body": {body}}}')
    result = cli("batch", str(path), "--endpoint", "sim", "--model", "fast")
    refused(result, f"dataset {path}, line 1: NaN is not JSON (numbers must be finite)", code=2)


@pytest.mark.timeout(60)
def test_vars_file_refuses_infinity(tmp_path: Path, demo_prompt: None) -> None:
    path = tmp_path / "vars.json"
    path.write_text('{"ticket": "hi", "n": Infinity}', encoding="utf-8")
    result = cli("prompt", "render", "ticket-triage", "--vars-file", str(path))
    refused(result, f"{path}: Infinity is not JSON (numbers must be finite)")


@pytest.mark.timeout(60)
def test_a_number_python_cannot_convert_is_one_line(tmp_path: Path, schema: Path) -> None:
    path = write(tmp_path / "outputs.jsonl", '{"output": "x", "n": ' + "9" * 5000 + "}")
    result = cli("validate", "--schema", str(schema), str(path))
    refused(result, f"outputs {path}, line 1: an integer of more than 4,300 digits")


# ---- text that is not UTF-8 ----------------------------------------------------------


def test_a_latin1_units_file_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "units.txt"
    path.write_bytes(b"C-1\ncaf\xe9\n")
    refused(
        cli("assign", "any", "--units", str(path)), f"units {path}, line 2, byte 4: not UTF-8 text"
    )


def test_latin1_units_on_stdin_name_the_line() -> None:
    result = cli("assign", "any", "--units", "-", input=b"caf\xe9\n")
    refused(result, "units (stdin), line 1, byte 4: not UTF-8 text")


# ---- the shared reader ---------------------------------------------------------------


def test_the_line_reader_counts_the_whole_stream() -> None:
    from promptlab.data.lines import LineLimits, numbered_lines

    limits = LineLimits(line_bytes=10, file_bytes=50, kind="a test file")
    stream = io.BytesIO(b"\xef\xbb\xbfab\r\n" + b"ab\n" * 100)  # a BOM is not text
    lines = numbered_lines(stream, "t", limits, SpecError)
    assert [next(lines), next(lines)] == [(1, "ab\r\n"), (2, "ab\n")]
    with pytest.raises(
        SpecError, match=r"^t, line 16: past 50 bytes, the most a test file may have$"
    ):
        list(lines)


@pytest.mark.parametrize(
    ("data", "error"),
    [
        (b"0123456789\n", None),  # ten bytes and its line end: at the limit
        (b"0123456789", None),  # the last line needs no end
        (b"0123456789A\n", "line 1: longer than 10 bytes, the most a line of a test file may have"),
        (b"ok\n\xff\n", "line 2, byte 1: not UTF-8 text"),
    ],
)
def test_the_line_reader_limits_a_line(data: bytes, error: str | None) -> None:
    from promptlab.data.lines import LineLimits, numbered_lines

    limits = LineLimits(line_bytes=10, file_bytes=100, kind="a test file")
    lines = numbered_lines(io.BytesIO(data), "t", limits, SpecError)
    if error is None:
        assert [text for _n, text in lines] == [data.decode()]
    else:
        with pytest.raises(SpecError, match=f"^t, {error}$"):
            list(lines)
