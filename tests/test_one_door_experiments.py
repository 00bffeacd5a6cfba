"""One door (issue 37) for `promptlab experiment add|list|show|export|set`, `promptlab
assign` and `promptlab exposures import`: with a server owning the database, each calls
typed routes (files read and written here), never `POST /v1/cli`, and prints exactly
what it prints on its own. The kill switch and the ramp are an admin's."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from promptlab.config import Settings
from promptlab.server.api import create_app
from promptlab.workbench import Workbench
from tests.one_door_helpers import assert_same_both_ways, invoke

DEMO = Path(__file__).resolve().parent.parent / "data" / "demo"

READING = [
    ["experiment", "list"],
    ["experiment", "show", "triage-split"],
    ["experiment", "show", "triage-split", "--revision", "1"],
    ["experiment", "show", "triage-split", "--revision", "9"],
    ["experiment", "show", "no-such"],
    ["experiment", "export", "triage-split"],
    ["experiment", "export", "triage-split", "--revision", "1"],
    ["experiment", "export", "no-such"],
    ["assign", "triage-split", "C-001", "C-002", "C-003"],
    ["assign", "triage-split", "--units", "{units}"],
    ["assign", "{config}", "C-001"],  # a config file: no database, no server
    ["assign", "no-such", "C-001"],
]

CHANGING = [
    ["experiment", "add", "{new}", "--note", "first"],
    ["experiment", "add", "{new}"],  # the same file: no changes
    ["experiment", "add", "{new_changed}", "--expect-revision", "1"],
    ["experiment", "add", "{new}", "--expect-revision", "1"],  # stale: refused
    ["experiment", "add", "{bad}"],  # refused here, before anything is sent
    ["experiment", "add", "{missing}"],
    ["experiment", "add", "{unknown_prompt}"],  # refused by the server's registry
    ["experiment", "set", "triage-split", "--weight", "staging=40", "--note", "more"],
    ["experiment", "set", "triage-split", "--weight", "staging=40"],  # no changes
    ["experiment", "set", "triage-split", "--ramp", "50"],
    ["experiment", "set", "triage-split", "--kill"],
    ["experiment", "set", "triage-split", "--revive", "--weight", "control=60"],
    ["experiment", "set", "triage-split", "--weight", "nope=3"],
    ["experiment", "set", "triage-split", "--weight", "staging=10", "--expect-revision", "1"],
    ["experiment", "set", "no-such", "--kill"],
    ["experiment", "set", "triage-split"],  # a usage error, before anything is sent
    ["experiment", "list"],
    ["experiment", "show", "triage-split"],
    ["experiment", "export", "triage-split", "-o", "{exported}"],
    ["experiment", "export", "triage-split", "-o", "{unwritable}"],
    ["exposures", "import", "{exposures}"],
    ["exposures", "import", "{exposures}"],  # already stored: none new
    ["exposures", "import", "{bad_exposures}"],
    ["exposures", "import", "{missing}"],
    ["experiment", "show", "triage-split"],
]


@pytest.fixture
def db(demo_db: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "experiments.duckdb"
    shutil.copyfile(demo_db, copy)
    return copy


def _files(db: Path, tmp_path: Path) -> dict[str, str]:
    config, exposures = tmp_path / "config.yaml", tmp_path / "exposures.jsonl"
    assert invoke(db, ["experiment", "export", "triage-split", "-o", str(config)]).exit_code == 0
    logged = invoke(db, ["assign", str(config), "C-001", "C-002", "C-003", "--log", str(exposures)])
    assert logged.exit_code == 0 and exposures.read_text(), logged.output
    bad_exposures = tmp_path / "bad-exposures.jsonl"
    first = exposures.read_text().splitlines()[0]
    broken = first.replace('"bucket": ', '"bucket": 99999')
    bad_exposures.write_text(f"{first}\n{broken}\n")
    units = tmp_path / "units.txt"
    units.write_text("C-001\n\nC-010\nC-011\n")
    variants = (
        "variants:\n  - {name: a, prompt: ticket-triage@production, weight: %s, control: true}\n"
        "  - {name: b, prompt: ticket-triage@staging, weight: 50}\n"
    )
    new = tmp_path / "new.yaml"
    new.write_text("name: new-split\nramp: 100\n" + variants % 50)
    new_changed = tmp_path / "new-changed.yaml"
    new_changed.write_text("name: new-split\nramp: 100\n" + variants % 25)
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: Bad Name\nvariants: []\n")
    unknown = tmp_path / "unknown.yaml"
    unknown.write_text(("name: unknown-prompt\n" + variants % 50).replace("@staging", "x@1.0.0"))
    return {
        "config": str(config),
        "units": str(units),
        "new": str(new),
        "new_changed": str(new_changed),
        "bad": str(bad),
        "missing": str(tmp_path / "missing.yaml"),
        "unknown_prompt": str(unknown),
        "exported": str(tmp_path / "exported.yaml"),
        "unwritable": str(tmp_path / "no-such-folder" / "x.yaml"),
        "exposures": str(exposures),
        "bad_exposures": str(bad_exposures),
    }


def test_experiment_commands_print_the_same_through_a_server(
    db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    values = _files(db, tmp_path)
    called = assert_same_both_ways(
        db, tmp_path, monkeypatch, reading=READING, changing=CHANGING, values=values
    )
    for route in (
        "GET /v1/experiments",
        "GET /v1/experiments/triage-split/revisions",
        "GET /v1/experiments/triage-split/revisions/latest",
        "GET /v1/experiments/triage-split/revisions/1",
        "GET /v1/experiments/triage-split/exposures",
        "GET /v1/experiments/triage-split/export",
        "POST /v1/experiments",
        "POST /v1/experiments/triage-split/weights",
        "POST /v1/experiments/triage-split/traffic",
        "POST /v1/exposures",
    ):
        assert route in called, (route, called)
    # The exported file is written here (the served pass wrote it last, the same text).
    assert Path(values["exported"]).read_text().startswith("# Experiment triage-split")


@pytest.fixture
def wb(demo_db: Path) -> Iterator[Workbench]:
    with Workbench.open(Settings.from_env().with_db(demo_db)) as workbench:
        yield workbench


def test_the_kill_switch_and_the_ramp_are_an_admin_s(wb: Workbench) -> None:
    api = TestClient(create_app(wb, "owner-token"), raise_server_exceptions=False)
    editor = {"Authorization": f"Bearer {wb.tokens.create('ed', 'editor')[1]}"}
    admin = {"Authorization": f"Bearer {wb.tokens.create('ad', 'admin')[1]}"}
    weights = api.post(
        "/v1/experiments/triage-split/weights", json={"weights": {"staging": 40}}, headers=editor
    )
    assert weights.status_code == 200 and weights.json()[1]["revision"] == 2
    for change in ({"killed": True}, {"ramp": 10}):
        refused = api.post("/v1/experiments/triage-split/traffic", json=change, headers=editor)
        assert refused.status_code == 403, refused.text
    assert wb.experiments.get("triage-split").revision == 2
    killed = api.post("/v1/experiments/triage-split/traffic", json={"killed": True}, headers=admin)
    assert killed.status_code == 200 and killed.json()[1]["killed"] is True
    # A file that moves the kill switch back is an admin's too; one that does not is not.
    data = wb.experiments.get("triage-split").content()
    body = {"experiment": {**data, "killed": False}, "source": "f.yaml"}
    refused = api.post("/v1/experiments", json=body, headers=editor)
    assert refused.status_code == 403 and "admin" in refused.json()["error"]
    body = {"experiment": {**data, "description": "reworded"}, "source": "f.yaml"}
    added = api.post("/v1/experiments", json=body, headers=editor)
    assert added.status_code == 201 and added.json()[1] is True
    assert wb.experiments.get("triage-split").killed is True
    # A new experiment's ramp is nobody's traffic yet: an editor may set it.
    new = {**data, "name": "fresh", "salt": "fresh", "ramp": 5}
    created = api.post("/v1/experiments", json={"experiment": new}, headers=editor)
    assert created.status_code == 201, created.text
