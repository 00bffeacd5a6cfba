"""The Experiments page's rollout tiles (issue 57), driven by AppTest on a real database:
the state, stage and units of a guarded rollout, a tile per guardrail, and pause and
resume from the page."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from promptlab.ui.resources import get_workbench
from tests.apptest_helpers import shown

PAGE = str(Path(__file__).resolve().parent.parent / "pages" / "experiments.py")
TIMEOUT_S = 30
NAME = "triage-rollout"


def add_rollout() -> None:
    get_workbench().experiments.add(
        {
            "name": NAME,
            "ramp": 5,
            "variants": [
                {
                    "name": "control",
                    "prompt": "ticket-triage@production",
                    "control": True,
                    "weight": 1,
                },
                {"name": "staging", "prompt": "ticket-triage@staging", "weight": 1},
            ],
            "rollout": {
                "variant": "staging",
                "stages": [5, 25, 100],
                "min_units_per_stage": 200,
                "guardrails": [
                    {"metric": "error_rate", "worse_by": 0.02},
                    {"metric": "latency_p90_ms", "worse_by": 300},
                ],
            },
        }
    )


def opened_on_the_rollout() -> AppTest:
    at = AppTest.from_file(PAGE, default_timeout=TIMEOUT_S).run()
    assert not at.exception, at.exception
    at.selectbox(key="experiment_choice").select(NAME).run()
    assert not at.exception, at.exception
    return at


def test_a_rollout_shows_its_stage_units_and_a_tile_per_guardrail() -> None:
    AppTest.from_file(PAGE, default_timeout=TIMEOUT_S).run()  # the demo, loaded
    add_rollout()
    at = opened_on_the_rollout()
    text = " ".join(m.value for m in at.markdown)
    assert "Rollout of staging" in text and "running" in text
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Stage"] == "1 of 3"
    assert metrics["Ramp"] == "5%"
    assert metrics["This stage"] == "0 of 200"
    # No live calls yet: each guardrail says so rather than showing a number.
    assert metrics["error_rate"] == metrics["latency_p90_ms"] == "not judged yet"


def test_pause_and_resume_from_the_page() -> None:
    AppTest.from_file(PAGE, default_timeout=TIMEOUT_S).run()
    add_rollout()
    at = opened_on_the_rollout()
    next(b for b in at.button if b.label == "Pause").click().run()
    assert not at.exception, at.exception
    assert get_workbench().rollouts.status(NAME).state == "running"  # it asks first
    assert any(f"Pause the rollout of {NAME}?" in shown(w.value) for w in at.warning)
    next(b for b in at.button if b.label == "Yes, pause").click().run()
    assert get_workbench().rollouts.status(NAME).state == "paused"
    assert [b.label for b in at.button if b.key and b.key.startswith("rollout_")] == [
        "Resume",
        "Abort",
    ]
    next(b for b in at.button if b.label == "Resume").click().run()
    next(b for b in at.button if b.label == "Yes, resume").click().run()
    assert get_workbench().rollouts.status(NAME).state == "running"


def test_each_guardrail_is_drawn_over_its_checks_with_its_band_and_margin() -> None:
    """As the tiles of LaunchDarkly's guarded rollouts: the difference at each check, its
    confidence sequence as a band, and the margin it is killed beyond (above for error
    rate and latency), from the checks the server kept."""
    from promptlab.store.rollouts import RolloutRows

    AppTest.from_file(PAGE, default_timeout=TIMEOUT_S).run()
    add_rollout()
    rows = RolloutRows(get_workbench().store)
    start = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)
    for n in range(3):  # the band narrows as units come in
        rows.add_looks(
            NAME,
            start + timedelta(minutes=n),
            [
                ("error_rate", 0.01, 0.01 - 0.05 / (n + 1), 0.01 + 0.05 / (n + 1)),
                ("latency_p90_ms", 40.0, 40.0 - 200 / (n + 1), 40.0 + 200 / (n + 1)),
            ],
        )
    at = opened_on_the_rollout()
    (history,) = [e for e in at.expander if e.label.startswith("Guardrails over time")]
    assert history.label == "Guardrails over time (3 checks)"
    specs = [json.loads(chart.proto.spec) for chart in history.get("plotly_chart")]
    assert [spec["layout"]["title"]["text"] for spec in specs] == [
        "error_rate: variant minus control",
        "latency_p90_ms: variant minus control",
    ]
    error_rate = {trace.get("name"): trace for trace in specs[0]["data"]}
    assert error_rate["difference"]["y"] == [1.0, 1.0, 1.0]  # in points
    low = error_rate["confidence sequence"]["y"]
    assert low == pytest.approx([-4.0, -1.5, 1.0 - 5 / 3])
    margins = [s["y0"] for s in specs[0]["layout"]["shapes"]]
    assert margins == [0, 2.0]  # zero, and the margin: 0.02 worse, in points
    assert [s["y0"] for s in specs[1]["layout"]["shapes"]] == [0, 300.0]
