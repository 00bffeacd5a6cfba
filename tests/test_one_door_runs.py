"""One renderer (issue 43): `run`, `batch`, `resume` and `status RUN_ID` print the same
lines whether the command runs the engine itself or a server owns the database. Run ids,
times and measured figures differ between two runs; every line, label and column may not.
The live progress too (issue 61): the progress line with its limiter part, and a
provider-batch run's batch lines, stepped by the fakellm the same way both times; through
a server, stderr starts with one line naming it.
"""

from __future__ import annotations

import functools
import json
import re
import threading
from pathlib import Path
from typing import Any

import click
import pytest
import yaml
from click.testing import Result

from promptlab.cli import run_text
from promptlab.engine.testing import ManualClock
from promptlab.fakellm.server import RunningServer
from tests.fakellm_fixtures import ServerFactory
from tests.one_door_helpers import invoke, through_line
from tests.test_server import Served

#: What two runs of the same spec may print differently: ids, times, figures.
_RUN_ID = re.compile(r"run_[0-9a-f]{12}")
_FIGURE = re.compile(r"\d+(\.\d+)?")


def shape(result: Result) -> list[str]:
    """The lines with run ids and numbers blanked; padding widths follow the figures."""
    text = _FIGURE.sub("#", _RUN_ID.sub("RUN", result.stdout))
    return [re.sub(r" +", " ", line).rstrip() for line in text.splitlines()]


def spec(tmp_path: Path) -> Path:
    (tmp_path / "rows.csv").write_text("q\n" + "".join(f"question {i}\n" for i in range(20)))
    path = tmp_path / "spec.yaml"
    path.write_text(
        "name: both ways\ndataset: rows.csv\nvariants:\n"
        "  - {name: a, model: 'sim:careful', messages: [{role: user, content: '{{ q }}'}]}\n"
        "  - {name: b, model: 'sim:fast', messages: [{role: user, content: '{{ q }}'}]}\n"
    )
    return path


def requests(tmp_path: Path) -> Path:
    path = tmp_path / "requests.jsonl"
    lines = [
        {"custom_id": f"r{i}", "body": {"messages": [{"role": "user", "content": f"q{i}"}]}}
        for i in range(10)
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def test_run_batch_and_status_print_the_same_lines_with_and_without_a_server(
    tmp_path: Path,
) -> None:
    alone, served = tmp_path / "alone.duckdb", tmp_path / "served.duckdb"
    commands = [
        ["run", str(spec(tmp_path)), "--quiet"],
        ["batch", str(requests(tmp_path)), "--endpoint", "sim", "--model", "careful", "--quiet"],
    ]
    direct = [invoke(alone, argv) for argv in commands]
    direct.append(invoke(alone, ["status", _RUN_ID.findall(direct[0].stdout)[0]]))
    server = Served(served)
    try:
        through = [invoke(served, argv) for argv in commands]
        through.append(invoke(served, ["status", _RUN_ID.findall(through[0].stdout)[0]]))
    finally:
        server.stop()
    for argv, one, other in zip([*commands, ["status"]], direct, through, strict=True):
        assert one.exit_code == other.exit_code == 0, (argv, one.output, other.output)
        assert shape(other) == shape(one), argv
    # The summary's latency table is there both ways.
    assert "p50 ms  p90 ms  p99 ms" in through[0].stdout


# ---- the live progress (issue 61) ------------------------------------------------------
#: Requests the endpoint has in flight at most: the fakellm holds them all.
CONCURRENCY = 4
#: Seconds a test waits for what it expects before it goes on and fails (never a sleep).
PATIENCE_S = 60.0
#: What may differ between two runs' progress lines: the bar's fill, each figure.
_BAR = re.compile(r"^\[[#.]+\]")
_SPAN = re.compile(r"\d+ h \d+ min|\d+ min|\d+ s")
_THROUGH = "through the promptlab server at "


def live_shape(line: str) -> str:
    """A progress or batch line with what moves blanked: ids, the bar, figures, spans."""
    line = _RUN_ID.sub("RUN", re.sub(r"batch_[0-9a-f]+", "BATCH", line))
    line = _BAR.sub("[BAR]", line).replace("-/s", "0/s").replace("ETA -", "ETA 0s")
    return _FIGURE.sub("#", _SPAN.sub("SPAN", line))


def live_lines(result: Result) -> list[str]:
    """What the command said on stderr while it followed the run (the server's line and
    the planning line, which either way may or may not catch, left out), as shapes."""
    said = [line for line in result.stderr.splitlines() if not line.startswith(_THROUGH)]
    return [live_shape(line) for line in said if not line.startswith("planning ")]


def fake_endpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake: RunningServer, **batch: float
) -> None:
    """`fake` in a providers file (a server started after this reads it too), with an
    rpm and a concurrency its limiter shows."""
    endpoint = {
        "kind": "openai",
        "base_url": fake.openai_base_url,
        "rpm": 600,
        "concurrency": CONCURRENCY,
        "models": {"*": {"context_window": 8192, "input_per_mtok": 1.0, "output_per_mtok": 2.0}},
        **({"batch": batch} if batch else {}),
    }
    providers = tmp_path / "providers.yaml"
    providers.write_text(yaml.safe_dump({"endpoints": {"fake": endpoint}}))
    monkeypatch.setenv("PROMPTLAB_PROVIDERS", str(providers))


def follow(
    db: Path, argv: list[str], monkeypatch: pytest.MonkeyPatch, steps: list[tuple[str, Any]]
) -> Result:
    """`argv` run to its end here, while a thread takes `steps` in order: each waits until
    the command has printed a line holding its text, then calls its action (moving the
    fakellm on). The command itself runs on this thread (it sets a SIGINT handler)."""
    printed: list[str] = []
    seen = threading.Condition()
    original = click.echo

    def echo(message: Any = None, *args: Any, **kwargs: Any) -> None:
        original(message, *args, **kwargs)
        with seen:
            printed.append(str(message))
            seen.notify_all()

    def shown(text: str) -> bool:
        return any(text in line for line in printed)

    def driver() -> None:
        for text, action in steps:
            with seen:
                seen.wait_for(functools.partial(shown, text), PATIENCE_S)
            action()  # on time or not: the command must end, and the test then fails

    with monkeypatch.context() as patched:
        patched.setattr(click, "echo", echo)
        # Every look at the run prints: the lines the steps wait for come without delay.
        patched.setattr(run_text, "REDRAW_PIPE_S", 0.0)
        thread = threading.Thread(target=driver, daemon=True)
        thread.start()
        try:
            return invoke(db, argv)
        finally:
            thread.join(PATIENCE_S)


def both_ways(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
    steps: list[tuple[str, Any]],
    start: Any = lambda: None,
) -> tuple[Result, Result]:
    """`argv` followed with `steps` on its own database, then through a server on another;
    `start()` before each."""
    start()
    alone = follow(tmp_path / "alone.duckdb", argv, monkeypatch, steps)
    server = Served(tmp_path / "served.duckdb")
    try:
        start()
        through = follow(tmp_path / "served.duckdb", argv, monkeypatch, steps)
    finally:
        server.stop()
    assert alone.exit_code == through.exit_code == 0, (alone.output, through.output)
    assert through.stderr.startswith(through_line(server)), through.stderr
    assert shape(through) == shape(alone)
    return alone, through


def test_the_progress_line_shows_the_limiter_the_same_through_a_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fakellm_factory: ServerFactory
) -> None:
    fake = fakellm_factory()
    fake_endpoint(tmp_path, monkeypatch, fake)
    (tmp_path / "rows.csv").write_text("q\n" + "".join(f"question {i}\n" for i in range(12)))
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "name: held\ndataset: rows.csv\nvariants:\n"
        "  - {name: a, model: 'fake:m', messages: [{role: user, content: '{{ q }}'}]}\n"
    )
    # Each run's requests are held in flight until its progress line has shown them.
    held = f"in flight {CONCURRENCY} queued"
    steps = [(held, lambda: fake.gate(None))]
    alone, through = both_ways(
        tmp_path, monkeypatch, ["run", str(spec)], steps, lambda: fake.gate(0)
    )
    limiter = f" | fake: 600rpm conc {CONCURRENCY}"
    for result in (alone, through):
        shown = [line for line in result.stderr.splitlines() if line.startswith("[")]
        assert any(held in line and line.endswith(limiter) for line in shown), result.stderr
    # The lines shown while the requests were held have one shape either way (the bar,
    # counts, rate and the limiter); a limiter may be gone as the run ends, either way.
    assert (
        {live_shape(line) for line in through.stderr.splitlines() if held in line}
        == {live_shape(line) for line in alone.stderr.splitlines() if held in line}
        == {"[BAR] #/# | ok # failed # in flight # queued # | #/s ETA #s | fake: #rpm conc #"}
    )


def test_a_provider_batch_run_says_its_batches_the_same_through_a_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fakellm_factory: ServerFactory
) -> None:
    clock = ManualClock()
    # A batch validates for its first second, then answers 5 lines a second until 9 s.
    fake = fakellm_factory(clock, batch_delay_s=10)
    fake_endpoint(tmp_path, monkeypatch, fake, max_requests=40, poll_s=0.02, linger_s=0.05)
    lines = [
        {
            "custom_id": f"r{i}",
            "body": {"model": "m", "messages": [{"role": "user", "content": f"q{i}"}]},
        }
        for i in range(40)
    ]
    requests = tmp_path / "requests.jsonl"
    requests.write_text("".join(json.dumps(line) + "\n" for line in lines))
    argv = ["batch", str(requests), "--endpoint", "fake", "--provider-batch"]
    steps = [
        ("(fake): validating, 0/40 done", lambda: clock.advance(6)),  # 25 lines answered
        ("(fake): in progress, 25/40 done", lambda: clock.advance(10)),  # all, and done
    ]
    alone, through = both_ways(tmp_path, monkeypatch, argv, steps)
    for result in (alone, through):
        for text, _ in steps:
            assert text in result.stderr, result.stderr
    # Each state the test stepped the batch through is said once, with the progress line
    # of the same look after it (the bar, counts, rate and the limiter), the same way.
    expected = [
        f"BATCH (fake): {state}, #/# done, for SPAN; expires in SPAN, then its unanswered lines "
        "are sent again in a new batch"
        for state in ("validating", "in progress")
    ]
    line = "[BAR] #/# | ok # failed # in flight # queued # | #/s ETA #s | fake: rpm - conc #"
    assert looks(through) == looks(alone) == [(said, line) for said in expected]


def looks(result: Result) -> list[tuple[str, str]]:
    """The batch lines a run command printed while its batch was validating or in
    progress, each with the line printed after it, as shapes."""
    lines = live_lines(result)
    return [
        (said, lines[i + 1])
        for i, said in enumerate(lines[:-1])
        if said.startswith("BATCH") and ("validating" in said or "in progress" in said)
    ]
