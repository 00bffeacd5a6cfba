"""One door (issue 37) for the analysis commands: `metrics`, `compare`, `feedback import`,
`logs import`, `shards` and `status --items / --item / --detect` call typed routes
when a server owns the database, never `POST /v1/cli`, and print exactly what they print
on their own (tests/one_door_helpers.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from promptlab.server.typed import from_wire, to_wire
from tests.one_door_helpers import assert_same_both_ways

A, B = "ticket-triage@1.1.0", "ticket-triage@2.0.0"
FILTERS = ["--status", "succeeded", "--variant", "staging"]
LOG_COLUMNS = [
    "--version-column",
    "ver",
    "--unit-column",
    "user",
    "--latency-column",
    "ms",
    "--clicked-column",
    "clicked",
]

#: Commands that change nothing: each runs directly, then through a server.
READING = [
    ["metrics"],
    ["metrics", "--json"],
    ["metrics", "--run", "{split}"],
    ["metrics", "--run", "{split}", "--json"],
    ["metrics", "--run", "{paired}", "--prompt", "ticket-triage"],
    ["metrics", "--prompt", "ticket-triage", "--since", "7d"],
    ["metrics", "--since", "2999-01-01"],
    ["metrics", "--logs"],
    ["metrics", "--logs", "--json"],
    ["metrics", "--since", "soon"],  # errors: the same line, the same exit code
    ["metrics", "--run", "run_nope"],
    ["metrics", "--logs", "--run", "{split}"],
    ["compare", "--run", "{split}"],
    ["compare", "--run", "{split}", "--json"],
    ["compare", "--run", "{paired}", "--mde", "5"],
    ["compare", "--run", "{paired}", "staging", "control", "--live", "--json"],
    ["compare", A, B],
    ["compare", A, B, "--since", "30d", "--json", "--mde", "10"],
    ["compare", A, B, "--run", "{paired}", "--final"],
    ["compare", A, B, "--run", "{split}", "--since", "7d"],
    ["compare", A, B, "--logs"],
    ["compare", A, "ticket-triage@9.9.9"],
    ["compare", "--run", "run_nope"],
    ["compare", "--run", "{split}", "control", "nobody"],
    ["compare", A, B, "--cuped"],
    ["shards", "{split}"],
    ["shards", "{split}", "no-such-session"],
    ["shards", "run_nope"],
    ["status", "{split}", "--items"],
    ["status", "{paired}", "--items", *FILTERS, "--limit", "5", "--offset", "3"],
    ["status", "{paired}", "--items", "--check", "valid", "--search", "refund"],
    ["status", "{split}", "--items", "--offset", "1000"],
    ["status", "{split}", "--item", "{key}"],
    ["status", "{split}", "--item", "{key8}"],
    ["status", "{split}", "--item", "zz"],
    ["status", "{split}", "--item", "00000000"],
    ["status", "run_nope", "--items"],
    ["status", "run_nope", "--item", "{key}"],
]
#: Commands that change the database: each pass runs them in order on its own copy.
CHANGING = [
    ["feedback", "import", "{feedback}"],
    ["metrics", "--run", "{split}"],
    ["metrics", "--prompt", "ticket-triage", "--json"],
    ["feedback", "import", "{bad_feedback}"],
    ["feedback", "import", "{missing}"],
    ["feedback", "import", "{no_suffix}"],
    ["logs", "import", "{logs}", *LOG_COLUMNS],
    ["logs", "import", "{logs}"],  # no `version` column: refused, naming the columns
    ["logs", "import", "{missing}"],
    ["metrics", "--logs"],
    ["metrics"],
    ["compare", A, B, "--logs"],
    ["compare", A, B, "--logs", "--since", "2026-01-01", "--cuped", "--json"],
    # The final look on the logs, taken once (30 units per arm of their own).
    ["logs", "import", "{own_units}", *LOG_COLUMNS],
    ["decide", A, B, "--show"],
    ["decide", A, B],  # refused: the planned 1,000 units per arm are not in
    ["decide", A, B, "--planned-units", "10"],
    ["decide", A, B, "--show"],
    ["decide", A, B, "--planned-units", "10"],  # refused: taken once
    ["status", "{split}", "--detect"],
    ["status", "run_nope", "--detect"],
]


@pytest.fixture
def db(runs: tuple[Path, str, str], tmp_path: Path) -> Path:
    copy = tmp_path / "runs.duckdb"
    shutil.copyfile(runs[0], copy)
    return copy


def _key(db: Path, run_id: str) -> str:
    from promptlab.config import Settings
    from promptlab.workbench import Workbench

    with Workbench.open(Settings.from_env().with_db(db)) as wb:
        return wb.runs.items(run_id, limit=1).rows[0].key


def _files(folder: Path) -> dict[str, str]:
    folder.mkdir()
    feedback = folder / "feedback.csv"
    rows = [f"{A},u{i},impression" for i in range(30)] + [f"{B},u{i},click" for i in range(9)]
    feedback.write_text("version,unit_id,kind\n" + "\n".join(rows) + "\n")
    bad = folder / "bad.csv"
    bad.write_text(f"version,unit_id,kind\n{A},u1,impression\n{A},u2,hug\n")
    logs = folder / "requests.csv"
    lines = [
        f"{A if i % 2 else B},u{i % 25},{100 + i},{'true' if i % 3 else 'false'}" for i in range(60)
    ]
    logs.write_text("ver,user,ms,clicked\n" + "\n".join(lines) + "\n")
    own_units = folder / "own-units.csv"
    lines = [
        f"{v},{v[-5:]}-{i},{100 + i},{'true' if i % 3 else 'false'}"
        for v in (A, B)
        for i in range(30)
    ]
    own_units.write_text("ver,user,ms,clicked\n" + "\n".join(lines) + "\n")
    no_suffix = folder / "feedback.txt"
    no_suffix.write_text("version,unit_id,kind\n")
    return {
        "feedback": str(feedback),
        "bad_feedback": str(bad),
        "logs": str(logs),
        "missing": str(folder / "gone.csv"),
        "no_suffix": str(no_suffix),
        "own_units": str(own_units),
    }


def test_analysis_commands_print_the_same_through_a_server_and_never_send_a_command_line(
    db: Path, runs: tuple[Path, str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    split, paired = runs[1], runs[2]
    key = _key(db, split)
    values = {"split": split, "paired": paired, "key": key, "key8": key[:8]}
    values.update(_files(tmp_path / "files"))
    called = assert_same_both_ways(
        db, tmp_path, monkeypatch, reading=READING, changing=CHANGING, values=values
    )
    for route in (
        "GET /v1/analysis/metrics",
        "GET /v1/analysis/log-metrics",
        "GET /v1/analysis/scores",
        f"GET /v1/runs/{split}/sessions",
        f"GET /v1/runs/{split}/comparison",
        "GET /v1/analysis/compare",
        f"GET /v1/runs/{split}/shards",
        f"GET /v1/runs/{split}/items",
        f"GET /v1/runs/{split}/items/{key}",
        "POST /v1/feedback",
        "POST /v1/logs",
        "GET /v1/analysis/decisions",
        "POST /v1/analysis/decisions",
        f"POST /v1/runs/{split}/anomalies",
        f"GET /v1/runs/{split}/view",
    ):
        assert route in called, route


def test_infinities_and_nan_travel_as_themselves() -> None:
    """A comparison's open interval or an SRM statistic may be infinite: JSON has no such
    number, and null would not decode into a float."""
    import json
    import math

    from promptlab.analysis.stats import Interval, SrmCheck

    srm = SrmCheck({"a": 3}, {"a": 0.0}, math.inf, 0.0, True)
    wire = to_wire(SrmCheck, srm)
    assert b'"statistic":"Infinity"' in wire
    assert from_wire(SrmCheck, json.loads(wire)) == srm
    back = from_wire(Interval, json.loads(to_wire(Interval, Interval(-math.inf, math.nan))))
    assert back.low == -math.inf and math.isnan(back.high)


def test_a_replay_s_shards_sessions_and_turns_print_the_same_through_a_server(
    db_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.test_conversations_shards import long_log, recorder
    from tests.test_conversations_shards import run as replay

    provider, _sent = recorder()
    run_id, progress = replay(db_path, tmp_path, provider, long_log())
    assert progress.status == "completed"
    key = _key(db_path, run_id)
    reading = [
        ["shards", "{run}"],
        ["shards", "{run}", "s1"],
        ["metrics", "--run", "{run}"],
        ["status", "{run}", "--items", "--search", "s1"],
        ["status", "{run}", "--item", "{key}"],
    ]
    called = assert_same_both_ways(
        db_path, tmp_path, monkeypatch, reading=reading, values={"run": run_id, "key": key}
    )
    assert f"GET /v1/runs/{run_id}/shards" in called
