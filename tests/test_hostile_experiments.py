"""Experiments refuse what cannot be split in one line: weights that are not finite or
absurd, too many variants, a model on an endpoint nobody configured, contradictory
switches. And the next command after a spill stores the spilled rows."""

# ruff: noqa: F811 - pytest fixtures imported from tests.test_engine_store_full

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result
from streamlit.testing.v1 import AppTest

from promptlab.cli import main
from promptlab.config import DEMO_DIR
from promptlab.engine.record.spill import read_spill, spill_dirs, spilled_files
from promptlab.errors import ExperimentError
from promptlab.experiments import MAX_VARIANTS, MAX_WEIGHT, parse_experiment_file
from promptlab.store import Store
from promptlab.ui.resources import get_workbench
from tests.apptest_helpers import shown
from tests.test_engine_store_full import (
    Disk,
    FillableItemStore,
    FillableRunStore,
    quick_stall,  # noqa: F401 - the fixture
    run_until_the_disk_fills,
    write_dataset,
)

pytestmark = pytest.mark.timeout(60)

DEMO_EXPERIMENT = DEMO_DIR / "experiments" / "triage-split.yaml"
PAGE = str(Path(__file__).resolve().parent.parent / "pages" / "experiments.py")
#: As many variants as the issue's file had.
HOSTILE_VARIANTS = 20_000


def cli(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def one_line(result: Result, code: int = 1) -> str:
    """The error of a refused command: its exit code, one line on stderr, no traceback."""
    assert result.exit_code == code, (result.output, result.exception)
    assert isinstance(result.exception, SystemExit), result.exception
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


@pytest.fixture
def db(tmp_path: Path) -> str:
    """A database with the demo prompt and the demo experiment (revision 1)."""
    path = str(tmp_path / "x.duckdb")
    assert cli("--db", path, "prompt", "add", str(DEMO_DIR / "ticket-triage.yaml")).exit_code == 0
    assert cli("--db", path, "experiment", "add", str(DEMO_EXPERIMENT)).exit_code == 0
    return path


def revision(db: str) -> int:
    shown = cli("--db", db, "experiment", "show", "triage-split").output
    return int(shown.split("revision ", 1)[1].split()[0])


def experiment_data(variants: int = 2, **first: Any) -> dict[str, Any]:
    data = yaml.safe_load(DEMO_EXPERIMENT.read_text())
    data["variants"] = [
        {"name": f"v{i}", "prompt": "ticket-triage@production", "weight": 1}
        for i in range(variants)
    ]
    data["variants"][0].update(control=True, **first)
    return data


def write_experiment(path: Path, data: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


# ---- weights ---------------------------------------------------------------------------


@pytest.mark.parametrize("weight", ["inf", "1e400", "nan", str(MAX_WEIGHT * 10)])
def test_experiment_set_refuses_a_weight_that_is_not_finite_or_absurd(db: str, weight: str) -> None:
    error = one_line(
        cli("--db", db, "experiment", "set", "triage-split", "--weight", f"control={weight}")
    )
    assert "weight" in error and str(MAX_WEIGHT) in error.replace(",", "")
    assert revision(db) == 1


@pytest.mark.parametrize("weight", [".inf", "1.0e+30"])
def test_an_experiment_file_with_such_a_weight_is_refused(
    db: str, tmp_path: Path, weight: str
) -> None:
    path = tmp_path / "bad.yaml"
    text = yaml.safe_dump(experiment_data()).replace("weight: 1\n", f"weight: {weight}\n", 1)
    path.write_text(text, encoding="utf-8")
    error = one_line(cli("--db", db, "experiment", "add", str(path)))
    assert f"{path}: variants[0].weight" in error


# ---- how many variants ----------------------------------------------------------------


def test_twenty_thousand_variants_are_refused_naming_the_cap() -> None:
    with pytest.raises(ExperimentError, match=f"at most {MAX_VARIANTS} variants"):
        parse_experiment_file(experiment_data(HOSTILE_VARIANTS), source="big.yaml")
    parse_experiment_file(experiment_data(MAX_VARIANTS))  # the cap itself is fine


def test_experiment_add_refuses_one_variant_over_the_cap(db: str, tmp_path: Path) -> None:
    path = write_experiment(tmp_path / "wide.yaml", experiment_data(MAX_VARIANTS + 1))
    error = one_line(cli("--db", db, "experiment", "add", str(path)))
    assert f"{path}: variants: at most {MAX_VARIANTS} variants" in error


# ---- endpoints --------------------------------------------------------------------------


def test_a_model_on_an_unknown_endpoint_is_refused_at_creation(db: str, tmp_path: Path) -> None:
    path = write_experiment(tmp_path / "evil.yaml", experiment_data(model="evil:../../x"))
    error = one_line(cli("--db", db, "experiment", "add", str(path)))
    assert "variants[0].model: unknown endpoint 'evil'" in error and "sim" in error
    listed = cli("--db", db, "experiment", "list").output
    assert "triage-split" in listed and "\ntriage-split" not in listed.split("triage-split", 1)[1]


def test_an_endpoint_of_the_providers_file_is_known(
    db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    providers = tmp_path / "providers.yaml"
    providers.write_text(
        "endpoints:\n  mine: {kind: openai, base_url: 'http://127.0.0.1:9/v1'}\n",
        encoding="utf-8",
    )
    monkeypatch.setenv("PROMPTLAB_PROVIDERS", str(providers))
    data = experiment_data(model="mine:gpt-4o-mini")
    data["name"] = "on-mine"
    path = write_experiment(tmp_path / "mine.yaml", data)
    added = cli("--db", db, "experiment", "add", str(path))
    assert added.exit_code == 0, added.output


def test_the_experiment_form_shows_the_unknown_endpoint_and_saves_nothing() -> None:
    at = AppTest.from_file(PAGE, default_timeout=30).run()
    assert not at.exception, at.exception
    at.text_input(key="new_name").input("evil-split")
    at.selectbox(key="new_v0_prompt").select("ticket-triage@1.0.0")
    at.text_input(key="new_v0_model").input("evil:../../x")
    at.selectbox(key="new_v1_prompt").select("ticket-triage@1.1.0")
    next(b for b in at.button if b.label == "Create experiment").click()
    at.run()
    assert not at.exception, at.exception
    errors = [shown(e.value) for e in at.error]
    assert any("variants[0].model: unknown endpoint 'evil'" in e for e in errors), errors
    assert [c.name for c in get_workbench().experiments.list()] == ["triage-split"]


# ---- the kill switch -------------------------------------------------------------------


def test_kill_and_revive_together_are_refused(db: str) -> None:
    result = cli("--db", db, "experiment", "set", "triage-split", "--kill", "--revive")
    assert result.exit_code == 2, result.output
    assert "--kill and --revive" in result.output
    assert revision(db) == 1


# ---- spills ------------------------------------------------------------------------------


def test_the_next_command_after_a_spill_stores_the_spilled_rows(
    tmp_path: Path, db_path: Path, quick_stall: None
) -> None:
    with Store(db_path) as store:
        disk = Disk(store)
        run_id, _ = run_until_the_disk_fills(
            store,
            FillableItemStore(disk),
            write_dataset(tmp_path / "rows.csv"),
            lambda: setattr(disk, "full", True),
            runs=FillableRunStore(disk),
        )
        with store.read() as cur:
            (stored,) = cur.execute(
                "SELECT count(*) FROM results WHERE run_id = ?", [run_id]
            ).fetchone() or (0,)
    spills = spilled_files(spill_dirs(db_path))
    assert spills, "the test did not leave a spill"
    spilled = sum(len(read_spill(path).finals) for path in spills)
    assert spilled > 0

    status = cli("--db", str(db_path), "status", run_id)  # not `resume`: any command
    assert status.exit_code == 0, status.output

    assert spilled_files(spill_dirs(db_path)) == []
    with Store(db_path) as store, store.read() as cur:
        (after,) = cur.execute(
            "SELECT count(*) FROM results WHERE run_id = ?", [run_id]
        ).fetchone() or (0,)
    assert after == stored + spilled
