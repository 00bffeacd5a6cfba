"""Feedback and production log imports, CTR metrics, and comparing versions by their logs.

Runs of the demo experiment (conftest's `runs`, built once) give real results to
attach feedback to; each test works on its own copy of that database.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner, Result

from promptlab.analysis.intervals import ctr_interval
from promptlab.analysis.stats import wilson_interval
from promptlab.cli import main
from promptlab.data.demo import DEMO_CLICK_SEED, demo_feedback_events
from promptlab.data.feedback import FeedbackImporter
from promptlab.errors import DatasetError, FeedbackError
from promptlab.prompts.registry import Registry
from promptlab.providers.simulator import click_probability, simulate_feedback
from promptlab.store import Store
from promptlab.store.feedback import ShownResult
from promptlab.workbench import Workbench
from tests.test_metrics import settings

KINDS = "impression, click, thumbs_up, thumbs_down, completed"


@pytest.fixture
def db(runs: tuple[Path, str, str], tmp_path: Path) -> Path:
    copy = tmp_path / "feedback.duckdb"
    shutil.copy(runs[0], copy)
    return copy


@pytest.fixture
def wb(db: Path) -> Iterator[Workbench]:
    with Store(db) as store, Workbench(store, settings(db)) as bench:
        yield bench


def keys(wb: Workbench, run_id: str, variant: str) -> list[str]:
    with wb.store.read() as cur:
        rows = cur.execute(
            "SELECT idempotency_key FROM results WHERE run_id = ? AND variant = ? ORDER BY seq",
            [run_id, variant],
        ).fetchall()
    return [r[0] for r in rows]


def stored(wb: Workbench, table: str = "feedback") -> list[tuple[object, ...]]:
    with wb.store.read() as cur:
        return cur.execute(f"SELECT * FROM {table}").fetchall()


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def version_id(wb: Workbench, ref: str) -> str:
    return wb.prompts.resolve(ref).id


# ---- importing feedback --------------------------------------------------------------


def test_csv_feedback_is_resolved_from_the_result(
    wb: Workbench,
    runs: tuple[Path, str, str],
    tmp_path: Path,
) -> None:
    key = keys(wb, runs[1], "staging")[0]
    path = write(
        tmp_path / "fb.csv",
        "result_id,version,unit_id,kind,value,event_time\n"
        f"{key},,,impression,,2026-11-01T10:00:00Z\n"
        f"{key},,,thumbs_up,2.5,2026-11-01 11:00:00+02:00\n"
        ",ticket-triage@production,u7,click,,2026-11-02\n",
    )
    assert wb.analysis.import_feedback(path) == 3
    rows = {r[5]: r for r in stored(wb)}
    staging = version_id(wb, "ticket-triage@staging")
    assert rows["impression"][:5] == (key, runs[1], staging, "staging", None)
    assert rows["thumbs_up"][6] == 2.5 and rows["impression"][6] == 1.0
    assert rows["thumbs_up"][7].isoformat() == "2026-11-01T09:00:00+00:00"
    # A row by version and unit: no result, so no key, run or variant.
    production = version_id(wb, "ticket-triage@production")
    assert rows["click"][:5] == (None, None, production, None, "u7")
    assert rows["click"][7].isoformat() == "2026-11-02T00:00:00+00:00"
    assert {r[8] for r in rows.values()} == {"fb.csv"}


def test_jsonl_and_parquet_feedback(
    wb: Workbench,
    runs: tuple[Path, str, str],
    tmp_path: Path,
) -> None:
    a, b = keys(wb, runs[1], "control")[:2]
    lines = [{"result_id": a, "kind": "impression"}, {"result_id": b, "kind": "click"}]
    path = write(tmp_path / "fb.jsonl", "\n".join(json.dumps(x) for x in lines) + "\n\n")
    assert wb.analysis.import_feedback(path) == 2
    parquet = tmp_path / "fb.parquet"
    with duckdb.connect() as con:
        con.execute(
            "COPY (SELECT ? AS result_id, 'completed' AS kind, 3.0 AS value, "
            "TIMESTAMPTZ '2026-11-03 08:00:00+00' AS event_time) TO ? (FORMAT parquet)",
            [a, str(parquet)],
        )
    assert wb.analysis.import_feedback(parquet) == 1
    kinds = sorted((r[0], r[5], r[6]) for r in stored(wb))
    assert kinds == sorted([(a, "impression", 1.0), (b, "click", 1.0), (a, "completed", 3.0)])


BAD_FEEDBACK = [
    ("{key},clik,,", "fb.csv, row 2, column kind: 'clik' is not one of " + KINDS),
    ("{key},,,", f"fb.csv, row 2, column kind: empty; expected one of {KINDS}"),
    ("nope,click,,", "fb.csv, row 2, column result_id: no result has id 'nope'"),
    ("{key},click,many,", "fb.csv, row 2, column value: 'many' is not a number"),
    (
        "{key},click,,yesterday",
        "fb.csv, row 2, column event_time: 'yesterday' is not a time "
        "(ISO 8601, e.g. 2026-11-01T09:30:00Z)",
    ),
    (
        # DuckDB's plain TIMESTAMP cast would drop the zone name and read 09:30 as UTC.
        "{key},click,,2026-11-01T09:30:00 America/Los_Angeles",
        "fb.csv, row 2, column event_time: '2026-11-01T09:30:00 America/Los_Angeles' is not "
        "a time (ISO 8601, e.g. 2026-11-01T09:30:00Z)",
    ),
    (
        ",click,,",
        "fb.csv, row 2: no result_id, and no version with a unit_id: a row names a result, "
        "or a prompt version and a unit",
    ),
]


@pytest.mark.parametrize(("line", "message"), BAD_FEEDBACK, ids=[m[1] for m in BAD_FEEDBACK])
def test_a_bad_feedback_row_is_named_and_nothing_is_written(
    wb: Workbench,
    runs: tuple[Path, str, str],
    tmp_path: Path,
    line: str,
    message: str,
) -> None:
    key = keys(wb, runs[1], "control")[0]
    path = write(
        tmp_path / "fb.csv",
        f"result_id,kind,value,event_time\n{key},impression,,\n{line.format(key=key)}\n",
    )
    with pytest.raises(FeedbackError) as raised:
        wb.analysis.import_feedback(path)
    assert str(raised.value) == message
    assert stored(wb) == []


def test_an_unknown_version_and_the_count_of_more_bad_rows(wb: Workbench, tmp_path: Path) -> None:
    path = write(
        tmp_path / "fb.csv",
        "version,unit_id,kind\nticket-triage@production,u1,click\n"
        "ticket-triage@9.9.9,u2,click\nticket-triage,u3,click\nticket-triage@2.0.0,u4,clak\n",
    )
    with pytest.raises(FeedbackError) as raised:
        wb.analysis.import_feedback(path)
    assert str(raised.value) == (
        "fb.csv, row 2, column version: 'ticket-triage@9.9.9' is no known prompt version "
        "(give name@version, name@label or a version id) (and 2 more bad rows; nothing was "
        "imported)"
    )
    assert stored(wb) == []


def test_jsonl_names_the_line_and_malformed_files_say_where(wb: Workbench, tmp_path: Path) -> None:
    text = (
        '{"version": "ticket-triage@2.0.0", "unit_id": "u", "kind": "click"}\n\n'
        '{"version": "x@1.0.0", "unit_id": "u", "kind": "click"}\n'
    )
    path = write(tmp_path / "fb.jsonl", text)
    with pytest.raises(FeedbackError, match=r"^fb\.jsonl, line 3, column version: 'x@1\.0\.0'"):
        wb.analysis.import_feedback(path)
    broken = write(tmp_path / "broken.jsonl", '{"kind": "click"}\n{"kind": \n')
    with pytest.raises(FeedbackError) as raised:
        wb.analysis.import_feedback(broken)
    assert str(raised.value).startswith("broken.jsonl, line 2: not valid JSON")
    short = write(tmp_path / "short.csv", "result_id,kind\nabc\n")
    with pytest.raises(FeedbackError) as raised:
        wb.analysis.import_feedback(short)
    assert str(raised.value) == "short.csv, line 2: expected 2 fields, found 1"
    no_kind = write(tmp_path / "nokind.csv", "result_id,what\nabc,click\n")
    with pytest.raises(FeedbackError) as raised:
        wb.analysis.import_feedback(no_kind)
    assert str(raised.value) == "nokind.csv: no column 'kind'; columns: result_id, what"
    assert stored(wb) == []


def test_the_file_size_is_bounded(wb: Workbench, tmp_path: Path) -> None:
    path = write(tmp_path / "fb.csv", "result_id,kind\nabc,click\n")
    importer = FeedbackImporter(wb.store, Registry(wb.store))
    with pytest.raises(FeedbackError) as raised:
        importer.import_feedback(path, max_bytes=10)
    assert str(raised.value) == "fb.csv: 25 bytes, more than the 10 a feedback file may have"


def test_rate_result_writes_an_app_row(wb: Workbench, runs: tuple[Path, str, str]) -> None:
    key = keys(wb, runs[1], "staging")[0]
    wb.analysis.rate_result(runs[1], key, "thumbs_down")
    (row,) = stored(wb)
    assert row[:6] == (
        key,
        runs[1],
        version_id(wb, "ticket-triage@staging"),
        "staging",
        None,
        "thumbs_down",
    )
    assert row[8] == "app:tester"  # who rated
    with pytest.raises(FeedbackError, match="rating 'meh' is not one of"):
        wb.analysis.rate_result(runs[1], key, "meh")
    with pytest.raises(FeedbackError, match=f"run {runs[1]} has no result 'nope'"):
        wb.analysis.rate_result(runs[1], "nope", "click")


# ---- CTR -----------------------------------------------------------------------------


def test_ctr_per_variant_and_version(
    wb: Workbench,
    runs: tuple[Path, str, str],
    tmp_path: Path,
) -> None:
    split = runs[1]
    control, staging = keys(wb, split, "control"), keys(wb, split, "staging")
    lines = ["result_id,kind"]
    lines += [f"{k},impression" for k in control[:20]]  # 20 impressions, 4 clicks
    lines += [f"{k},click" for k in control[:4]]
    lines += [f"{control[0]},click"]  # a second click on one impression is not counted
    lines += [f"{control[25]},click"]  # a click with no impression is not counted
    lines += [f"{k},impression" for k in staging[:10]]  # 10 impressions, 6 clicks
    lines += [f"{k},click" for k in staging[:6]] + [f"{staging[0]},thumbs_up"]
    wb.analysis.import_feedback(write(tmp_path / "fb.csv", "\n".join(lines) + "\n"))
    rows = {r.variant: r for r in wb.analysis.metrics(run_id=split)}
    assert (rows["control"].impressions, rows["control"].clicks) == (20, 4)
    assert (rows["staging"].impressions, rows["staging"].clicks) == (10, 6)
    assert rows["staging"].thumbs_up == 1 and rows["control"].ctr == 0.2
    assert ctr_interval(rows["staging"]) == wilson_interval(6, 10)
    versions = {r.prompt_version: r for r in wb.analysis.metrics(prompt="ticket-triage")}
    assert (versions["1.1.0"].impressions, versions["1.1.0"].clicks) == (20, 4)
    assert (versions["2.0.0"].impressions, versions["2.0.0"].clicks) == (10, 6)
    comparison = wb.analysis.compare(split)
    ctr = next(r for r in comparison.rows if r.metric == "CTR")
    # Impressions and clicks summed per customer: the units that saw an impression.
    with wb.store.read() as cur:
        shown = dict(
            cur.execute(
                "SELECT r.variant, count(DISTINCT a.unit_id) FROM results r JOIN assignments a "
                "USING (run_id, row_index) WHERE r.idempotency_key IN (SELECT idempotency_key "
                "FROM feedback WHERE kind = 'impression') GROUP BY ALL"
            ).fetchall()
        )
    assert (ctr.n_control, ctr.n_variant) == (shown["control"], shown["staging"])
    assert (ctr.requests_control, ctr.requests_variant) == (20, 10)
    assert (ctr.control_value, ctr.variant_value) == (0.2, 0.6)
    out = CliRunner().invoke(main, ["--db", str(wb.store.path), "metrics", "--run", split])
    assert "feedback (CTR: clicks over impressions):" in out.output
    assert any(
        line.split()[:5] == ["staging", "sim:careful", "10", "6", "60.0%"]
        for line in out.output.splitlines()
    )


def test_a_version_on_two_models_gets_each_models_ctr_once(
    wb: Workbench,
    runs: tuple[Path, str, str],
    tmp_path: Path,
) -> None:
    control = keys(wb, runs[1], "control")
    fast = control[:10]
    with wb.store.transaction() as tx:  # as if half the results had come from another model
        tx.execute(
            "UPDATE results SET model = 'fast' WHERE idempotency_key IN "
            f"({', '.join('?' * len(fast))})",
            fast,
        )
    lines = ["result_id,version,unit_id,kind"]
    lines += [f"{k},,,impression" for k in control[8:12]]  # 2 on each model
    lines += [f"{control[9]},,,click"]  # on the fast model
    wb.analysis.import_feedback(write(tmp_path / "fb.csv", "\n".join(lines) + "\n"))
    rows = {
        r.model: r
        for r in wb.analysis.metrics(prompt="ticket-triage")
        if r.prompt_version == "1.1.0"
    }
    assert {m: (r.impressions, r.clicks) for m, r in rows.items()} == {
        "sim:fast": (2, 1),
        "sim:careful": (2, 0),
    }
    # Feedback naming only the version and a unit has no model: a version run on two
    # models gives it to neither row.
    wb.analysis.import_feedback(
        write(tmp_path / "u.csv", "version,unit_id,kind\nticket-triage@1.1.0,u1,impression\n")
    )
    after = {
        r.model: r.impressions
        for r in wb.analysis.metrics(prompt="ticket-triage")
        if r.prompt_version == "1.1.0"
    }
    assert after == {"sim:fast": 2, "sim:careful": 2}


# ---- production logs -----------------------------------------------------------------

N = 40


def log_csv(path: Path) -> Path:
    """40 requests of each version, with columns named as a service might name them."""
    lines = ["served_by,uid,ms,click,done,at"]
    for i in range(N):
        lines.append(
            f"ticket-triage@production,a{i},{300 + (i * 37) % 200},"
            f"{'true' if i % 20 == 0 else 'false'},{0 if i % 5 == 0 else 1},"
            f"2026-11-2{i % 8}T10:00:00Z"
        )
        lines.append(
            f"ticket-triage@2.0.0,b{i},{280 + (i * 53) % 190},"
            f"{'yes' if i % 8 == 0 else 'no'},{'false' if i % 10 == 0 else 'true'},"
            f"2026-11-2{i % 8}T11:00:00+01:00"
        )
    return write(path, "\n".join(lines) + "\n")


def cli(*args: str) -> Result:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_a_log_compares_per_unit_and_too_few_users_say_so(wb: Workbench, tmp_path: Path) -> None:
    db = str(wb.store.path)
    wb.close()
    path = log_csv(tmp_path / "requests.csv")
    mapping = [
        "--version-column",
        "served_by",
        "--unit-column",
        "uid",
        "--latency-column",
        "ms",
        "--clicked-column",
        "click",
        "--completed-column",
        "done",
        "--time-column",
        "at",
    ]
    imported = cli("--db", db, "logs", "import", str(path), *mapping)
    assert imported.output == "imported 80 requests from requests.csv\n"
    live = json.loads(
        cli(
            "--db",
            db,
            "compare",
            "ticket-triage@production",
            "ticket-triage@2.0.0",
            "--logs",
            "--json",
        ).output
    )
    # Logs keep arriving: by default the always-valid test, safe to look at again.
    assert live["method"] == "always valid (mSPRT)"
    result = cli(
        "--db",
        db,
        "compare",
        "ticket-triage@production",
        "ticket-triage@2.0.0",
        "--logs",
        "--final",
        "--json",
    )
    data = json.loads(result.output)
    assert data["mode"] == "logs" and data["control"] == "ticket-triage@1.1.0"
    assert data["method"] == "fixed horizon, final look (4% of 5%)"
    # Every line names its own user, so per unit is per request here: 40 of each.
    assert data["arms"] == {
        "ticket-triage@1.1.0": {"units": 40, "requests": 40},
        "ticket-triage@2.0.0": {"units": 40, "requests": 40},
    }
    # Reference values: Wilson by scipy.stats.binomtest(k, 40).proportion_ci("wilson");
    # the rows by the delta method written out below in numpy.
    a, b = data["logs"]
    assert (a["requests"], a["completed"], a["clicks"]) == (40, 32, 2)
    assert (b["requests"], b["completed"], b["clicks"]) == (40, 36, 5)
    assert a["completion_low"] == pytest.approx(0.6524269365360051, abs=1e-12)
    assert a["completion_high"] == pytest.approx(0.8950001027456229, abs=1e-12)
    assert b["completion_low"] == pytest.approx(0.769482247724777, abs=1e-12)
    assert b["completion_high"] == pytest.approx(0.9604204713173935, abs=1e-12)
    assert a["ctr_low"] == pytest.approx(0.013820667386148358, abs=1e-12)
    assert a["ctr_high"] == pytest.approx(0.16503877369140962, abs=1e-12)
    assert b["ctr_low"] == pytest.approx(0.05459500250945404, abs=1e-12)
    assert b["ctr_high"] == pytest.approx(0.26112119838851094, abs=1e-12)
    rows = {r["metric"]: r for r in data["rows"]}
    assert list(rows) == ["completion rate", "CTR", "latency p50", "latency p90", "latency p99"]
    done, ctr = rows["completion rate"], rows["CTR"]
    assert (done["control_value"], done["variant_value"]) == (0.8, 0.9)
    assert (ctr["control_value"], ctr["variant_value"]) == (0.05, 0.125)
    assert (done["n_control"], done["n_variant"]) == (40, 40)
    assert (done["requests_control"], done["requests_variant"]) == (40, 40)
    # 40 users a version: too few for any verdict (the per-unit methods are checked
    # against their formulas in tests/test_units.py); each row says so, none is tested.
    for row in data["rows"]:
        assert row["verdict"] == "too few units" and row["analysed_by"] == "unit"
        assert row["reason"] == "too few units (40; a verdict needs 100 per arm)"
        assert row["adjusted_p"] is None and row["interval"] is None
    assert done["effect"] == pytest.approx(0.1) and ctr["effect"] == pytest.approx(0.075)
    assert data["answer"][0].startswith(
        "ticket-triage@2.0.0 against ticket-triage@1.1.0: too few units to judge completion rate"
    )
    table = cli("--db", db, "metrics", "--logs", "--prompt", "ticket-triage")
    assert table.output.splitlines()[1].split()[:3] == ["ticket-triage@1.1.0", "40", "80.0%"]


def test_bad_log_rows_and_columns(wb: Workbench, tmp_path: Path) -> None:
    head = "version,latency_ms,clicked,completed\n"
    good = "ticket-triage@2.0.0,120,true,false\n"
    cases = {
        ",1,true,true": "logs.csv, row 2, column version: empty; give name@version, "
        "name@label or a version id",
        "ticket-triage@2.0.0,-4,true,true": "logs.csv, row 2, column latency_ms: '-4' is not a "
        "latency (milliseconds, 0 or more)",
        "ticket-triage@2.0.0,3,maybe,true": "logs.csv, row 2, column clicked: 'maybe' is not "
        "true or false",
        "ticket-triage@2.0.0,3,true,2": "logs.csv, row 2, column completed: '2' is not true "
        "or false",
    }
    for line, message in cases.items():
        path = write(tmp_path / "logs.csv", head + good + line + "\n")
        with pytest.raises(FeedbackError) as raised:
            wb.analysis.import_logs(path)
        assert str(raised.value) == message
    path = write(tmp_path / "logs.csv", head + good)
    with pytest.raises(FeedbackError) as raised:
        wb.analysis.import_logs(path, {"latency_ms": "duration"})
    assert str(raised.value) == (
        "logs.csv: no column 'duration'; columns: version, latency_ms, clicked, completed"
    )
    assert stored(wb, "production_logs") == []
    assert wb.analysis.import_logs(path) == 1


# ---- the demo ------------------------------------------------------------------------


def test_the_demo_run_records_simulated_clicks_once(tmp_path: Path) -> None:
    path = tmp_path / "demo.duckdb"
    with Store(path) as store, Workbench(store, settings(path)) as wb:
        wb.demo.load()
        run_id = wb.demo.start_run()
        assert run_id is not None
        wb.runs.wait(run_id, 120)
        wb.demo.record_feedback(run_id)  # whether or not the background thread was first
        assert wb.demo.record_feedback(run_id) == 0
        rows = {r.variant: r for r in wb.analysis.metrics(run_id=run_id)}
        shown = demo_results(wb, run_id)
        # Each click is the simulator's click model's draw for that result.
        messages = {
            v.id: [{"role": m.role, "content": m.content} for m in v.template.messages]
            for v in wb.prompts.history("ticket-triage").versions
        }
        clicked = {
            r.key
            for r in shown
            if simulate_feedback(
                r.model,
                r.output_text,
                r.key,
                seed=DEMO_CLICK_SEED,
                prompt_messages=messages[r.prompt_version_id],
                fault="truncated" if r.finish_reason == "length" else None,
            )
        }
        for variant, row in rows.items():
            assert row.impressions == row.succeeded > 0
            assert row.clicks == sum(1 for r in shown if r.variant == variant and r.key in clicked)
        ctr = next(r for r in wb.analysis.compare(run_id).rows if r.metric == "CTR")
        assert ctr.control == "control" and ctr.variant == "staging"
        assert {r[8] for r in stored(wb)} == {"demo"}


def demo_results(wb: Workbench, run_id: str) -> list[ShownResult]:
    with wb.store.read() as cur:
        rows = cur.execute(
            "SELECT idempotency_key, variant, prompt_version_id, model, "
            "coalesce(output_text, ''), finish_reason FROM results WHERE run_id = ? "
            "AND status = 'succeeded'",
            [run_id],
        ).fetchall()
    return [ShownResult(*r) for r in rows]


def test_demo_clicks_follow_the_simulators_click_model() -> None:
    """Seeded by the key, at the rate the click model gives the model, prompt and answer:
    a better-written prompt and an answer of a readable length get more clicks."""
    plain = [{"role": "user", "content": "{{ ticket }}"}]
    written = [
        {
            "role": "system",
            "content": "You are a support assistant. Answer in JSON, "
            'for example {"category": "bug"}; check the ticket step by step.',
        },
        {"role": "user", "content": "Ticket from a customer, please classify: {{ ticket }}"},
    ]
    answer = "The customer cannot log in since the update; route it to the account team now."
    results = [
        ShownResult(f"{i:032x}", "v", "plain" if i % 2 else "written", "careful", answer, None)
        for i in range(4000)
    ]
    messages = {"plain": plain, "written": written}
    events = demo_feedback_events(results, messages.__getitem__)
    assert events == demo_feedback_events(results, messages.__getitem__)
    clicks = {k for k, kind in events if kind == "click"}
    for version in ("plain", "written"):
        keys = [r.key for r in results if r.prompt_version_id == version]
        rate = sum(k in clicks for k in keys) / len(keys)
        expected = click_probability("careful", answer, prompt_messages=messages[version])
        assert abs(rate - expected) < 0.03
    assert click_probability("careful", answer, prompt_messages=written) > click_probability(
        "careful", answer, prompt_messages=plain
    )


def test_cli_feedback_import_and_compare_by_version_in_a_run(
    wb: Workbench,
    runs: tuple[Path, str, str],
    tmp_path: Path,
) -> None:
    split = runs[1]
    key = keys(wb, split, "control")[0]
    db = str(wb.store.path)
    wb.close()
    good = write(tmp_path / "fb.csv", f"result_id,kind\n{key},impression\n")
    assert cli("--db", db, "feedback", "import", str(good)).output == (
        "imported 1 feedback events from fb.csv\n"
    )
    bad = write(tmp_path / "bad.csv", f"result_id,kind\n{key},clik\n")
    result = CliRunner().invoke(main, ["--db", db, "feedback", "import", str(bad)])
    assert result.exit_code != 0
    assert result.output.strip().endswith(
        "bad.csv, row 1, column kind: 'clik' is not one of " + KINDS
    )
    by_version = json.loads(
        cli(
            "--db",
            db,
            "compare",
            "ticket-triage@production",
            "ticket-triage@staging",
            "--run",
            split,
            "--json",
        ).output
    )
    by_variant = json.loads(cli("--db", db, "compare", "--run", split, "--json").output)
    assert by_version["rows"] == by_variant["rows"]
    usage = CliRunner().invoke(main, ["--db", db, "compare", "--logs"])
    assert usage.exit_code == 2 and "give --run RUN, or two versions" in usage.output


def test_a_small_parquet_file_stating_too_many_rows_is_refused_before_reading(
    wb: Workbench, tmp_path: Path
) -> None:
    import duckdb

    from promptlab.data.datasets import MAX_FILE_ROWS

    bomb = tmp_path / "bomb.parquet"
    with duckdb.connect() as con:  # one repeated value compresses to a few kilobytes
        con.execute(
            f"COPY (SELECT 'impression' AS kind FROM range({MAX_FILE_ROWS + 1})) TO ? "
            "(FORMAT parquet)",
            [str(bomb)],
        )
    assert bomb.stat().st_size < 1_000_000
    expected = f"bomb.parquet: {MAX_FILE_ROWS + 1:,} rows, more than the {MAX_FILE_ROWS:,}"
    with pytest.raises(FeedbackError, match=expected + " a feedback file may have"):
        wb.analysis.import_feedback(bomb)
    with pytest.raises(FeedbackError, match=expected + " a log file may have"):
        wb.analysis.import_logs(bomb)
    with pytest.raises(DatasetError, match=expected + " a dataset may have"):
        wb.datasets.import_file(bomb, "bomb")
    assert stored(wb) == [] and "bomb" not in {d.name for d in wb.datasets.list()}
