"""Experiments run through the engine: sticky split plans, recorded assignments, estimates."""

from __future__ import annotations

import csv
import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from promptlab.config import DEMO_DIR, Settings
from promptlab.engine import parse_spec
from promptlab.errors import SpecError
from promptlab.experiments import assign, bucket_of
from promptlab.records import RunStatus
from promptlab.store import Store
from promptlab.workbench import Workbench

#: data/demo/tickets.csv: 40 tickets from 17 customers.
ROWS = 40


@pytest.fixture
def wb(store: Store) -> Iterator[Workbench]:
    bench = Workbench(store, Settings.from_env())
    bench.demo.load()
    yield bench
    bench.close()


def planned(store: Store, run_id: str) -> list[tuple[Any, ...]]:
    """(customer_id, variant) of every item, from the rows the run copied."""
    with store.read() as cur:
        rows = cur.execute(
            "SELECT r.row_values, v.name FROM items i "
            "JOIN run_rows r ON r.run_id = i.run_id AND r.row_index = i.row_index "
            "JOIN run_variants v ON v.run_id = i.run_id AND v.variant_index = i.variant_index "
            "WHERE i.run_id = ? ORDER BY i.seq",
            [run_id],
        ).fetchall()
    return [(json.loads(values)["customer_id"], variant) for values, variant in rows]


def recorded(store: Store, run_id: str) -> list[tuple[Any, ...]]:
    with store.read() as cur:
        return cur.execute(
            "SELECT unit_id, variant, bucket, in_experiment, experiment, revision "
            "FROM assignments WHERE run_id = ? ORDER BY row_index",
            [run_id],
        ).fetchall()


def test_a_split_run_sends_each_row_to_its_unit_s_one_variant(wb: Workbench, store: Store) -> None:
    config = wb.experiments.get("triage-split")
    run_id = wb.runs.start(wb.runs.experiment_spec("triage-split", "tickets"))
    assert wb.runs.wait(run_id, 60).status == RunStatus.COMPLETED
    items = planned(store, run_id)
    assert len(items) == ROWS  # one item per row, not one per variant
    for customer, variant in items:
        assert variant == assign(config, customer).variant
    # Sticky: every row of one customer went to the same variant.
    by_customer: dict[str, set[str]] = {}
    for customer, variant in items:
        by_customer.setdefault(customer, set()).add(variant)
    assert len(by_customer) == 17 and all(len(v) == 1 for v in by_customer.values())
    # Every decision is recorded with the plan: unit, variant, bucket, revision.
    decisions = recorded(store, run_id)
    assert [(d[0], d[1]) for d in decisions] == items
    assert all(d[2] == bucket_of(config.salt, d[0]) for d in decisions)
    assert {(d[3], d[4], d[5]) for d in decisions} == {(True, "triage-split", 1)}
    counts = {c.variant: c.rows for c in wb.experiments.assignment_counts(run_id=run_id)}
    assert counts == Counter(v for _, v in items)
    assert set(counts) == {"control", "staging"}


def test_an_all_mode_run_sends_every_row_through_every_variant(wb: Workbench, store: Store) -> None:
    run_id = wb.runs.start(wb.runs.experiment_spec("triage-split", "tickets", mode="all"))
    assert wb.runs.wait(run_id, 60).status == RunStatus.COMPLETED
    assert Counter(v for _, v in planned(store, run_id)) == {"control": ROWS, "staging": ROWS}
    assert recorded(store, run_id) == []


def test_the_kill_switch_sends_every_unit_to_control(wb: Workbench, store: Store) -> None:
    wb.experiments.update("triage-split", killed=True, note="broken")
    run_id = wb.runs.start(wb.runs.experiment_spec("triage-split", "tickets", limit_rows=10))
    assert wb.runs.wait(run_id, 60).status == RunStatus.COMPLETED
    assert {v for _, v in planned(store, run_id)} == {"control"}
    assert {(d[1], d[3], d[5]) for d in recorded(store, run_id)} == {("control", False, 2)}


def test_a_weight_change_is_a_new_revision_that_the_next_run_follows(
    wb: Workbench, store: Store
) -> None:
    config = wb.experiments.update("triage-split", weights={"control": 0, "staging": 100})
    assert config.revision == 2
    run_id = wb.runs.start(wb.runs.experiment_spec("triage-split", "tickets", limit_rows=5))
    assert wb.runs.wait(run_id, 60).status == RunStatus.COMPLETED
    assert {v for _, v in planned(store, run_id)} == {"staging"}


def test_a_row_without_a_unit_id_is_refused_before_the_run_exists(
    wb: Workbench, tmp_path: Path
) -> None:
    rows = tmp_path / "rows.csv"
    rows.write_text("customer_id,ticket\nC-1,Refund please\n,No customer here\n")
    wb.datasets.import_file(rows, "orphans")
    spec = wb.runs.experiment_spec("triage-split", "orphans")
    with pytest.raises(SpecError, match=r"dataset row 2: no unit id in column 'customer_id'"):
        wb.runs.start(spec)
    assert wb.runs.list() == []


def test_a_unit_column_the_dataset_lacks_is_named(wb: Workbench) -> None:
    spec = wb.runs.experiment_spec("triage-split", "tickets", unit_column="user")
    with pytest.raises(SpecError, match=r"unit_column: dataset tickets has no column 'user'"):
        wb.runs.start(spec)
    assert wb.runs.list() == []


def test_a_pasted_spec_names_the_experiment_and_its_revision(wb: Workbench) -> None:
    wb.experiments.update("triage-split", ramp=50)
    spec = wb.runs.parse_spec("experiment: triage-split@1\ndataset: tickets\n")
    assert spec.experiment is not None and spec.experiment["revision"] == 1
    assert spec.split and spec.unit_column == "customer_id" and spec.dataset_name == "tickets"
    assert [v.prompt for v in spec.variants][0].startswith("ticket-triage@sha256:")
    with pytest.raises(SpecError, match="experiment: no experiment named 'nope'"):
        wb.runs.parse_spec("experiment: nope\ndataset: tickets\n")
    with pytest.raises(SpecError, match="give 'experiment' or 'variants', not both"):
        wb.runs.parse_spec(
            "experiment: triage-split\ndataset: tickets\nvariants: [{prompt: ticket-triage}]\n"
        )


def test_the_estimate_counts_the_split_it_will_plan(wb: Workbench, store: Store) -> None:
    spec = wb.runs.experiment_spec("triage-split", "tickets", repeats=2)
    estimate = wb.runs.estimate(spec)
    by_variant = {v.name: v.requests for v in estimate.variants}
    assert estimate.requests == 2 * ROWS
    assert estimate.input_tokens > 0 and estimate.output_tokens > 0
    assert estimate.cost_usd is not None and estimate.cost_usd > 0
    assert estimate.seconds > 0 and "sim" in estimate.bound
    assert all(v.basis.startswith("simulator on ") for v in estimate.variants)
    run_id = wb.runs.start(spec)
    assert wb.runs.wait(run_id, 60).status == RunStatus.COMPLETED
    # Per variant: the split the run gave (each customer hashed), not the weights' 56/24.
    assert by_variant == Counter(v for _, v in planned(store, run_id))
    assert sum(by_variant.values()) == 80
    # The next estimate of the same versions learns from the results stored.
    again = wb.runs.estimate(spec)
    assert all(v.basis.endswith("results") for v in again.variants)


def test_rows_a_template_refuses_are_skipped_when_asked(
    wb: Workbench, store: Store, tmp_path: Path
) -> None:
    rows = tmp_path / "rows.csv"
    rows.write_text(
        "customer_id,ticket,customer_tier\n"
        "C-1,Refund please,pro\n"
        "C-2,Card declined,gold\n"  # not one of free, pro, enterprise
        "C-3,Cannot log in,free\n"
    )
    wb.datasets.import_file(rows, "mixed")
    check = wb.datasets.check_rows("mixed", "ticket-triage@staging")  # 2.0.0 has the tier
    assert check.bad_rows == frozenset({2})
    skipping = wb.runs.experiment_spec("triage-split", "mixed", skip_invalid_rows=True)
    assert wb.runs.estimate(skipping).requests == 2
    run_id = wb.runs.start(skipping)
    assert wb.runs.wait(run_id, 60).status == RunStatus.COMPLETED
    assert [c for c, _ in planned(store, run_id)] == ["C-1", "C-3"]
    assert [d[0] for d in recorded(store, run_id)] == ["C-1", "C-3"]
    # Without it the row goes out and fails as invalid input on staging, as before.
    run_id = wb.runs.start(wb.runs.experiment_spec("triage-split", "mixed", mode="all"))
    assert wb.runs.wait(run_id, 60).status == RunStatus.COMPLETED
    assert wb.runs.view(run_id).failure_kinds == {"invalid_input": 1}


def test_the_estimate_follows_ramp_and_kill_switch(wb: Workbench) -> None:
    wb.experiments.update("triage-split", ramp=50)  # half the units stay on control
    by_variant = {
        v.name: v.requests
        for v in wb.runs.estimate(wb.runs.experiment_spec("triage-split", "tickets")).variants
    }
    # Each ticket to its customer's variant, as the run will send it (not 0.85 x 40 = 34).
    config = wb.experiments.get("triage-split")
    with (DEMO_DIR / "tickets.csv").open() as tickets:
        customers = [row["customer_id"] for row in csv.DictReader(tickets)]
    assert by_variant == Counter(assign(config, c).variant for c in customers)
    assert by_variant["staging"] < 0.3 * ROWS
    wb.experiments.update("triage-split", killed=True)
    by_variant = {
        v.name: v.requests
        for v in wb.runs.estimate(wb.runs.experiment_spec("triage-split", "tickets")).variants
    }
    assert by_variant == {"control": 40, "staging": 0}


def test_the_estimate_checks_what_submit_checks(wb: Workbench) -> None:
    spec = wb.runs.experiment_spec("triage-split", "tickets", unit_column="user")
    with pytest.raises(SpecError, match=r"unit_column: dataset tickets has no column 'user'"):
        wb.runs.estimate(spec)


def test_a_pasted_config_must_be_a_stored_revision(wb: Workbench) -> None:
    config = wb.experiments.get("triage-split").to_dict()
    same = wb.runs.parse_spec(yaml.safe_dump({"experiment": config, "dataset": "tickets"}))
    assert same.experiment is not None and same.experiment["salt"] == "triage-split"
    forged = {**config, "salt": "other"}
    with pytest.raises(SpecError, match="not revision 1 of triage-split as stored"):
        wb.runs.parse_spec(yaml.safe_dump({"experiment": forged, "dataset": "tickets"}))


def test_a_dataset_named_with_a_dot_runs_and_resumes(wb: Workbench, tmp_path: Path) -> None:
    rows = tmp_path / "rows.csv"
    rows.write_text("customer_id,ticket\nC-1,Refund please\nC-2,Cannot log in\n")
    wb.datasets.import_file(rows, "tickets.v2")
    spec = wb.runs.experiment_spec("triage-split", "tickets.v2")
    assert spec.dataset_name == "tickets.v2"
    run_id = wb.runs.start(spec)
    assert wb.runs.wait(run_id, 60).status == RunStatus.COMPLETED
    stored = wb.runs.view(run_id).run.spec
    assert stored["dataset"] == {"name": "tickets.v2"}
    assert parse_spec(stored).dataset_name == "tickets.v2"  # what resume reads back
