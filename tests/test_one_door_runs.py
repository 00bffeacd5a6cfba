"""One renderer (issue 43): `run`, `batch`, `resume` and `status RUN_ID` print the same
lines whether the command runs the engine itself or a server owns the database. Run ids,
times and measured figures differ between two runs; every line, label and column may not.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from click.testing import Result

from tests.one_door_helpers import invoke
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
