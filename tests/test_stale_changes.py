"""Changes made from two places at once do not overwrite each other: a review decision, a
label move and an experiment change name the version their maker saw, and one made on a
version someone has changed since is refused (StaleChangeError) naming who changed it
and when. A settled review item changes only through an explicit, audited reopen."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner, Result
from streamlit.testing.v1 import AppTest

from promptlab.audit.actor import acting_as
from promptlab.cli import main
from promptlab.config import DEMO_DIR, Settings
from promptlab.engine.testing import ManualClock
from promptlab.errors import StaleChangeError
from promptlab.prompts.files import load_prompt_file
from promptlab.prompts.registry import NO_VERSION
from promptlab.store.audit import AuditFilter
from promptlab.store.migrations import MIGRATIONS, apply_migrations
from promptlab.ui.resources import get_workbench
from promptlab.workbench import Workbench
from tests.apptest_helpers import shown

ROOT = Path(__file__).resolve().parent.parent
PAGE = str(ROOT / "pages" / "review.py")
START = datetime(2030, 12, 3, 10, 2, tzinfo=UTC)
TIMEOUT_S = 60


@pytest.fixture
def sim_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The simulated models answer at once: a run takes no wall-clock time."""
    providers = tmp_path / "providers.yaml"
    providers.write_text("endpoints:\n  sim: {kind: sim, latency_scale: 0}\n")
    monkeypatch.setenv("PROMPTLAB_PROVIDERS", str(providers))


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(START)


@pytest.fixture
def wb(db_path: Path, sim_only: None, clock: ManualClock) -> Iterator[Workbench]:
    with Workbench.open(Settings.from_env(), clock=clock) as opened:
        yield opened


def reviewed_run(wb: Workbench, tmp_path: Path, rows: int = 3) -> tuple[str, list[int]]:
    """A small run on a simulated model, each of its rows sent to review by hand."""
    dataset = tmp_path / "rows.csv"
    dataset.write_text("text\n" + "".join(f"row {i}\n" for i in range(rows)), encoding="utf-8")
    spec = wb.runs.spec_from_data(
        {
            "name": "to review",
            "dataset": str(dataset),
            "variants": [
                {
                    "name": "v",
                    "model": "sim:fast",
                    "messages": [{"role": "user", "content": "Say {{ text }}"}],
                }
            ],
        }
    )
    run_id = wb.runs.start(spec)
    assert wb.runs.wait(run_id, timeout=TIMEOUT_S).status == "completed"
    return run_id, wb.review.add(run_id, list(range(rows)))


def cli(db: Path, *args: str) -> Result:
    return CliRunner().invoke(main, ["--db", str(db), *args])


def review_events(wb: Workbench, run_id: str) -> list[tuple[str, str, int]]:
    return [
        (e.kind, e.actor, e.payload["version"])
        for e in wb.audit.events(AuditFilter(run_id=run_id))
        if e.kind.startswith("review.") and e.kind != "review.added"
    ]


# ---- review decisions ------------------------------------------------------------------


def test_a_second_decider_holding_the_old_version_is_refused_and_the_first_stands(
    wb: Workbench, tmp_path: Path, clock: ManualClock
) -> None:
    run_id, (item_id, *_) = reviewed_run(wb, tmp_path)
    seen = wb.review.show(item_id).item  # both reviewers open the item at this version
    assert (seen.status, seen.version) == ("open", 0)
    with acting_as("alice"):
        settled = wb.review.accept(item_id, version=seen.version)
    assert (settled.status, settled.version, settled.decided_by) == ("accepted", 1, "alice")
    clock.advance(90)
    with acting_as("bob"), pytest.raises(StaleChangeError) as refused:
        wb.review.correct(item_id, "something else", version=seen.version)
    message = str(refused.value)
    assert f"review {item_id} (row {seen.row_index + 1} of run {run_id})" in message
    assert "was settled `accepted` by alice at 2030-12-03 10:02 UTC" in message
    assert message.endswith("after you saw version 0; reopen it first (version 1 now)")
    assert "\n" not in message
    assert (refused.value.changed_by, refused.value.changed_at) == ("alice", START)
    # Holding the current version changes nothing: a settled item needs a reopen.
    with acting_as("bob"), pytest.raises(StaleChangeError, match="settled `accepted` by alice"):
        wb.review.reject(item_id, version=settled.version)
    with acting_as("bob"), pytest.raises(StaleChangeError, match="settled `accepted` by alice"):
        wb.review.reject(item_id)  # without a version: the item as it is, settled
    after = wb.review.show(item_id).item
    assert (after.status, after.answer, after.decided_by, after.version) == (
        "accepted",
        seen.proposed,
        "alice",
        1,
    )
    assert review_events(wb, run_id) == [("review.accepted", "alice", 1)]


def test_reopen_then_decide_works_and_both_are_in_the_audit_trail(
    wb: Workbench, tmp_path: Path, clock: ManualClock, db_path: Path
) -> None:
    run_id, (item_id, *_) = reviewed_run(wb, tmp_path)
    with acting_as("alice"):
        wb.review.accept(item_id, version=0)
    clock.advance(60)
    with acting_as("bob"):
        reopened = wb.review.reopen(item_id, "the proposed answer is wrong", version=1)
    assert (reopened.status, reopened.version, reopened.answer, reopened.decided_by) == (
        "open",
        2,
        None,
        None,
    )
    assert (reopened.changed_by, reopened.changed_at) == ("bob", START.replace(minute=3))
    # Alice, still holding version 1, is told the item was reopened, by whom and when.
    with acting_as("alice"), pytest.raises(StaleChangeError) as refused:
        wb.review.reject(item_id, version=1)
    assert str(refused.value).endswith(
        "was reopened by bob at 2030-12-03 10:03 UTC after you saw version 1; "
        "look at it again (version 2 now)"
    )
    with acting_as("bob"):
        corrected = wb.review.correct(item_id, "the right answer", version=2)
    assert (corrected.status, corrected.answer, corrected.version) == (
        "corrected",
        "the right answer",
        3,
    )
    events = review_events(wb, run_id)
    assert events == [
        ("review.accepted", "alice", 1),
        ("review.reopened", "bob", 2),
        ("review.corrected", "bob", 3),
    ]
    (reopen_event,) = [
        e for e in wb.audit.events(AuditFilter(run_id=run_id)) if e.kind == "review.reopened"
    ]
    assert reopen_event.payload["was"] == "accepted"
    assert reopen_event.payload["decided_by"] == "alice"
    assert reopen_event.payload["note"] == "the proposed answer is wrong"
    # An open item has nothing to reopen.
    with pytest.raises(Exception, match="nothing to reopen"):
        wb.review.reopen(wb.review.list("open", run_id)[0].id)
    wb.close()
    verified = cli(db_path, "audit", "verify")
    assert verified.exit_code == 0, verified.output


def test_the_review_commands_carry_the_version_and_reopen(
    wb: Workbench, tmp_path: Path, db_path: Path
) -> None:
    run_id, (item_id, other, _) = reviewed_run(wb, tmp_path)
    wb.close()
    detail = cli(db_path, "review", "show", str(item_id))
    assert "open (version 0)" in detail.output
    assert cli(db_path, "review", "reject", str(item_id), "--expect-version", "0").exit_code == 0
    stale = cli(db_path, "review", "accept", str(item_id), "--expect-version", "0")
    assert stale.exit_code == 1
    assert "was settled `rejected` by tester at " in stale.output
    assert "reopen it first" in stale.output
    settled = cli(db_path, "review", "correct", str(item_id), "x")  # no version: as it is now
    assert settled.exit_code == 1 and "reopen it first" in settled.output
    again = cli(db_path, "review", "reopen", str(item_id), "--expect-version", "1")
    assert again.exit_code == 0 and f"review {item_id}: open again (version 2)" in again.output
    stale_reopen = cli(db_path, "review", "reopen", str(other), "--expect-version", "3")
    assert stale_reopen.exit_code == 1 and "nothing to reopen" not in stale_reopen.output
    decided = cli(db_path, "review", "correct", str(item_id), "fixed", "--expect-version", "2")
    assert decided.exit_code == 0 and "(version 3)" in decided.output
    assert cli(db_path, "audit", "verify").exit_code == 0
    assert "reopen" in cli(db_path, "review", "reopen", "--help").output


def test_the_review_page_shows_the_refusal_and_what_is_current(
    db_path: Path, tmp_path: Path, sim_only: None
) -> None:
    wb = get_workbench()
    run_id, (item_id, *_) = reviewed_run(wb, tmp_path)
    at = AppTest.from_file(PAGE, default_timeout=TIMEOUT_S).run()
    assert not at.exception
    assert at.subheader[0].value.startswith(f"Item {item_id}:")
    # Someone else settles the item while it is on this page.
    with acting_as("alice"):
        wb.review.accept(item_id, version=0)
    next(b for b in at.button if b.label == "Reject").click().run()  # type: ignore[attr-defined]
    assert not at.exception
    (error,) = at.error
    assert "was settled `accepted` by alice at " in shown(error.value)
    assert "reopen it first" in shown(error.value)
    assert wb.review.show(item_id).item.status == "accepted"  # the first decision stands
    # The page now shows the item as it is, with a way to reopen it.
    assert any("accepted by alice" in s.value for s in at.success)
    next(b for b in at.button if b.label == "Reopen").click().run()  # type: ignore[attr-defined]
    assert not at.exception and not at.error
    assert wb.review.show(item_id).item.status == "open"
    next(b for b in at.button if b.label == "Reject").click().run()  # type: ignore[attr-defined]
    assert not at.exception and not at.error
    assert wb.review.show(item_id).item.status == "rejected"
    kinds = [e.kind for e in wb.audit.events(AuditFilter(run_id=run_id))]
    assert kinds[-3:] == ["review.accepted", "review.reopened", "review.rejected"]


def test_items_settled_before_versions_existed_keep_working(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A database from before the migration: its settled items count as one change by
    their decider, open ones as none; both are decided (or reopened) as usual."""
    path = tmp_path / "old.duckdb"
    conn = duckdb.connect(str(path))
    try:
        apply_migrations(conn, tuple(m for m in MIGRATIONS if m.name < "0018"), lambda: START)
        conn.execute(
            "INSERT INTO review_items (run_id, row_index, source, reason, status, answer, "
            "created_by, created_at, decided_by, decided_at) VALUES "
            "('r', 0, 'hand', 'x', 'accepted', 'yes', 'ann', ?, 'ann', ?), "
            "('r', 1, 'hand', 'x', 'open', NULL, 'ann', ?, NULL, NULL)",
            [START, START, START],
        )
    finally:
        conn.close()
    monkeypatch.setenv("PROMPTLAB_DB", str(path))
    with Workbench.open() as wb:
        settled, opened = wb.review.list(None)
        assert (settled.version, settled.changed_by, settled.changed_at) == (1, "ann", START)
        assert (opened.version, opened.changed_by) == (0, None)
        with pytest.raises(StaleChangeError, match="settled `accepted` by ann at 2030-12-03"):
            wb.review.reject(settled.id, version=0)
        assert wb.review.reopen(settled.id, version=1).version == 2
        assert wb.review.reject(opened.id, version=0).version == 1


# ---- prompt labels -----------------------------------------------------------------------


def test_a_label_move_on_a_stale_expectation_is_refused_naming_who_moved_it(
    wb: Workbench, clock: ManualClock, db_path: Path
) -> None:
    wb.prompts.import_file(load_prompt_file(DEMO_DIR / "ticket-triage.yaml"))
    labels = wb.prompts.labels("ticket-triage")
    saw = labels["production"]  # what both movers see
    other = next(v for v in wb.prompts.versions("ticket-triage") if v.id != saw.id)
    clock.advance(120)
    with acting_as("alice"):
        wb.prompts.set_label("ticket-triage", other.semver, "production", expected=saw.semver)
    with acting_as("bob"), pytest.raises(StaleChangeError) as refused:
        wb.prompts.set_label("ticket-triage", saw.semver, "production", expected=saw.id)
    assert str(refused.value) == (
        f"ticket-triage@production was moved to {other.semver} by alice at 2030-12-03 10:04 "
        f"UTC, but you saw it at {saw.semver}; look again before moving it"
    )
    assert wb.prompts.labels("ticket-triage")["production"].id == other.id  # alice's stands
    # A new label: `none` is what a mover saw when there was no such label.
    with acting_as("alice"):
        wb.prompts.set_label("ticket-triage", other.semver, "canary", expected=NO_VERSION)
    with pytest.raises(StaleChangeError, match="canary was moved to .* by alice"):
        wb.prompts.set_label("ticket-triage", saw.semver, "canary", expected=NO_VERSION)
    with pytest.raises(StaleChangeError, match="does not exist, but you saw it at"):
        wb.prompts.set_label("ticket-triage", saw.semver, "beta", expected=other.semver)
    # Without an expectation (old scripts) a move goes through, as before.
    assert wb.prompts.set_label("ticket-triage", saw.semver, "production").id == saw.id
    wb.close()
    stale = cli(
        db_path,
        "prompt",
        "label",
        "ticket-triage",
        other.semver,
        "production",
        "--expect-version",
        other.semver,
    )
    assert stale.exit_code == 1 and "was moved to" in stale.output
    moved = cli(
        db_path,
        "prompt",
        "label",
        "ticket-triage",
        other.semver,
        "production",
        "--expect-version",
        saw.semver,
    )
    assert moved.exit_code == 0, moved.output
    assert cli(db_path, "audit", "verify").exit_code == 0


def test_the_label_route_takes_the_expected_version(wb: Workbench) -> None:
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from promptlab.server.data_routes import add_data_routes

    wb.prompts.import_file(load_prompt_file(DEMO_DIR / "ticket-triage.yaml"))
    saw = wb.prompts.labels("ticket-triage")["production"]
    other = next(v for v in wb.prompts.versions("ticket-triage") if v.id != saw.id)
    app = FastAPI()
    add_data_routes(app, wb, [])  # the routes alone: the server maps the error to 409
    client = TestClient(app)
    url = "/v1/prompts/ticket-triage/labels/production"
    assert client.put(url, json={"ref": other.semver, "expected": saw.semver}).status_code == 200
    with pytest.raises(StaleChangeError, match="was moved to"):
        client.put(url, json={"ref": saw.semver, "expected": saw.semver})
    assert wb.prompts.labels("ticket-triage")["production"].id == other.id


# ---- experiments -------------------------------------------------------------------------


def test_an_experiment_change_on_a_stale_revision_is_refused_naming_who_made_the_newer(
    wb: Workbench, clock: ManualClock, db_path: Path
) -> None:
    wb.prompts.import_file(load_prompt_file(DEMO_DIR / "ticket-triage.yaml"))
    config, _ = wb.experiments.add(DEMO_DIR / "experiments" / "triage-split.yaml")
    saw = config.revision  # both people see revision 1
    clock.advance(180)
    with acting_as("alice"):
        ramped = wb.experiments.update(config.name, ramp=50, based_on=saw)
    assert ramped.revision == saw + 1
    with acting_as("bob"), pytest.raises(StaleChangeError) as refused:
        wb.experiments.update(config.name, killed=True, based_on=saw)
    assert str(refused.value) == (
        f"experiment 'triage-split' is at revision {saw + 1}, made by alice at 2030-12-03 "
        f"10:05 UTC, but the change was made on revision {saw}; look at revision "
        f"{saw + 1} and change it again"
    )
    latest = wb.experiments.get(config.name)
    assert (latest.revision, latest.ramp, latest.killed) == (saw + 1, 50, False)
    with pytest.raises(StaleChangeError, match="made by alice"):
        wb.experiments.add(DEMO_DIR / "experiments" / "triage-split.yaml", based_on=saw)
    # Without an expectation (old scripts) a change goes through, as before.
    assert wb.experiments.update(config.name, killed=True).killed
    wb.close()
    stale = cli(
        db_path, "experiment", "set", "triage-split", "--ramp", "10", "--expect-revision", str(saw)
    )
    assert stale.exit_code == 1 and f"is at revision {saw + 2}, made by tester" in stale.output
    ok = cli(
        db_path,
        "experiment",
        "set",
        "triage-split",
        "--ramp",
        "10",
        "--expect-revision",
        str(saw + 2),
    )
    assert ok.exit_code == 0 and f"revision {saw + 3}" in ok.output
    assert cli(db_path, "audit", "verify").exit_code == 0


def test_the_experiments_page_refuses_a_change_made_on_an_older_revision(
    db_path: Path, sim_only: None
) -> None:
    wb = get_workbench()
    wb.prompts.import_file(load_prompt_file(DEMO_DIR / "ticket-triage.yaml"))
    config, _ = wb.experiments.add(DEMO_DIR / "experiments" / "triage-split.yaml")
    at = AppTest.from_file(str(ROOT / "pages" / "experiments.py"), default_timeout=TIMEOUT_S)
    at.run()
    assert not at.exception
    with acting_as("alice"):
        wb.experiments.update(config.name, ramp=50, based_on=config.revision)
    next(b for b in at.button if b.label == "Save as new revision").click().run()  # type: ignore[attr-defined]
    assert not at.exception
    assert any("made by alice" in shown(e.value) for e in at.error)
    assert wb.experiments.get(config.name).revision == config.revision + 1
