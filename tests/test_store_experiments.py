"""Experiments in the store, through the workbench: revisions, pins, exposures, assignments."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from promptlab.config import DEMO_DIR, Settings
from promptlab.data.demo import load_demo_prompts
from promptlab.errors import ExperimentError
from promptlab.experiments import (
    allocate,
    assign,
    exposure_line,
    owners,
)
from promptlab.facades.experiments import EXPOSURE_BATCH
from promptlab.prompts.registry import Registry
from promptlab.store import ExperimentStore, Store
from promptlab.workbench import Workbench

DEMO_EXPERIMENT = DEMO_DIR / "experiments" / "triage-split.yaml"
NOW = datetime(2026, 1, 2, tzinfo=UTC)


@pytest.fixture
def wb(store: Store) -> Iterator[Workbench]:
    bench = Workbench(store, Settings.from_env())
    load_demo_prompts(Registry(bench.store))  # prompts only: the demo experiment is added by tests
    yield bench
    bench.close()


def data(**overrides: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": "tone",
        "unit_column": "customer_id",
        "variants": [
            {
                "name": "control",
                "prompt": "ticket-triage@production",
                "weight": 70,
                "control": True,
            },
            {"name": "concise", "prompt": "ticket-triage@staging", "weight": 30},
        ],
    }
    out.update(overrides)
    return out


def test_adding_pins_versions_and_an_identical_file_creates_nothing(wb: Workbench) -> None:
    config, created = wb.experiments.add(DEMO_EXPERIMENT)
    assert created and config.revision == 1 and config.author == "tester"
    assert (
        config.variant("control").prompt_version_id
        == wb.prompts.resolve("ticket-triage@production").id
    )
    assert (
        config.variant("staging").prompt_version_id
        == wb.prompts.resolve("ticket-triage@staging").id
    )
    assert config.bucket_counts() == {"control": 7000, "staging": 3000}
    again, created = wb.experiments.add(DEMO_EXPERIMENT)
    assert not created and again == config
    assert len(wb.experiments.history("triage-split")) == 1
    assert [c.name for c in wb.experiments.list()] == ["triage-split"]


def test_an_exported_config_added_back_changes_nothing(wb: Workbench, tmp_path: Path) -> None:
    wb.experiments.add(data())
    path = tmp_path / "tone.yaml"
    path.write_text(wb.experiments.export("tone"), encoding="utf-8")
    wb.prompts.set_label("ticket-triage", "1.0.0", "staging")  # the label moves; the file pins
    _, created = wb.experiments.add(path)
    assert not created


def test_every_change_is_a_new_revision_with_author_time_and_note(wb: Workbench) -> None:
    first, _ = wb.experiments.add(data(), note="start")
    second = wb.experiments.update("tone", weights={"concise": 50, "control": 50}, note="more")
    third = wb.experiments.update("tone", ramp=25)
    fourth = wb.experiments.update("tone", killed=True, note="bad outputs")
    same = wb.experiments.update("tone", killed=True)
    revived = wb.experiments.update("tone", killed=False)
    assert revived.revision == 5 and revived.allocation == fourth.allocation == second.allocation
    assert assign(revived, "c1") == assign(third, "c1")  # units come back to their variants
    assert [c.revision for c in (first, second, third, fourth, same)] == [1, 2, 3, 4, 4]
    history = wb.experiments.history("tone")
    assert [(c.revision, c.note) for c in history] == [
        (5, ""),
        (4, "bad outputs"),
        (3, ""),
        (2, "more"),
        (1, "start"),
    ]
    assert all(c.author == "tester" and c.created_at.tzinfo is not None for c in history)
    assert wb.experiments.get("tone", 2).bucket_counts() == {"control": 5000, "concise": 5000}
    assert wb.experiments.get("tone", 4).killed and wb.experiments.get("tone").ramp == 25
    # The weight change moved only the 2,000 buckets concise gained.
    moved = sum(
        a != b for a, b in zip(owners(first.allocation), owners(second.allocation), strict=True)
    )
    assert moved == 2000


def test_re_adding_an_edited_file_keeps_buckets_where_it_can(wb: Workbench) -> None:
    first, _ = wb.experiments.add(data())
    edited = data()
    edited["variants"][0]["weight"] = 60
    edited["variants"][1]["weight"] = 30
    edited["variants"].append({"name": "long", "prompt": "ticket-triage@1.0.0", "weight": 10})
    second, created = wb.experiments.add(edited, note="third arm")
    assert created and second.revision == 2
    assert second.allocation == allocate(second.weights, first.allocation)
    assert second.bucket_counts() == {"control": 6000, "concise": 3000, "long": 1000}


def test_refusals(wb: Workbench) -> None:
    wb.experiments.add(data())
    with pytest.raises(ExperimentError, match="salt: tone was created with salt 'tone'"):
        wb.experiments.add(data(salt="other"))
    with pytest.raises(ExperimentError, match="has no variant 'nope'"):
        wb.experiments.update("tone", weights={"nope": 1})
    with pytest.raises(ExperimentError, match="ramp: expected a percentage"):
        wb.experiments.update("tone", ramp=150)
    with pytest.raises(ExperimentError, match="no experiment named 'ghost'"):
        wb.experiments.get("ghost")
    with pytest.raises(ExperimentError, match="has no revision 9"):
        wb.experiments.get("tone", 9)
    bad = data()
    bad["variants"][1]["prompt"] = "ticket-triage@nightly"
    with pytest.raises(ExperimentError, match=r"variants\[1\].prompt: .*nightly"):
        wb.experiments.add(bad)
    assert len(wb.experiments.history("tone")) == 1


def write_log(path: Path, lines: list[str]) -> None:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def test_exposures_import_whole_and_once(wb: Workbench, tmp_path: Path) -> None:
    config, _ = wb.experiments.add(data())
    lines = [exposure_line(assign(config, f"c{i}"), config, NOW) for i in range(500)]
    log = tmp_path / "exposures.jsonl"
    write_log(log, lines)
    assert wb.experiments.import_exposures(log) == 500
    assert wb.experiments.import_exposures(log) == 0  # the same exposures are not stored twice
    counts = wb.experiments.exposure_counts("tone")
    assert sum(counts.values()) == 500 and set(counts) == {(1, "control"), (1, "concise")}


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"experiment": "ghost"}, "no experiment named 'ghost'"),
        ({"revision": 7}, "has no revision 7"),
        ({"variant": "nope"}, "has no variant 'nope'"),
        ({"time": "not a time"}, "time: expected an ISO-8601 time"),
    ],
)
def test_a_bad_exposure_line_is_named_and_nothing_is_imported(
    wb: Workbench, tmp_path: Path, bad: dict[str, Any], message: str
) -> None:
    config, _ = wb.experiments.add(data())
    lines = [exposure_line(assign(config, f"c{i}"), config, NOW) for i in range(10)]
    lines.insert(5, json.dumps({**json.loads(lines[0]), **bad}))
    log = tmp_path / "exposures.jsonl"
    write_log(log, lines)
    with pytest.raises(ExperimentError) as caught:
        wb.experiments.import_exposures(log)
    assert str(caught.value).startswith(f"exposures {log}, line 6: ")
    assert message in str(caught.value)
    assert wb.experiments.exposure_counts("tone") == {}


def test_a_bad_line_after_whole_batches_were_inserted_rolls_them_back(
    wb: Workbench, tmp_path: Path
) -> None:
    config, _ = wb.experiments.add(data())
    count = EXPOSURE_BATCH * 2 + 10
    lines = [exposure_line(assign(config, f"c{i}"), config, NOW) for i in range(count)]
    lines.append(json.dumps({**json.loads(lines[0]), "variant": "nope"}))
    log = tmp_path / "exposures.jsonl"
    write_log(log, lines)
    with pytest.raises(ExperimentError, match=f"line {count + 1}: .*has no variant 'nope'"):
        wb.experiments.import_exposures(log)
    assert wb.experiments.exposure_counts("tone") == {}


def test_revisions_race_is_refused(store: Store) -> None:
    rows = ExperimentStore(store)
    rows.add_revision("x", 1, "x", "{}", author="a", created_at=NOW, note="")
    with pytest.raises(Exception, match="changed meanwhile"):
        rows.add_revision("x", 1, "x", "{}", author="b", created_at=NOW, note="")
