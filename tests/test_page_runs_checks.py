"""The Runs page shows output checks: rates per variant, failing fields, an item's errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from streamlit.testing.v1 import AppTest

from promptlab.ui.resources import get_workbench
from tests.apptest_helpers import shown
from tests.test_engine_checks import checks_spec

PAGE = str(Path(__file__).resolve().parent.parent / "pages" / "runs.py")
TIMEOUT_S = 30


def table_with(at: AppTest, column: str) -> Any:
    return next((d.value for d in at.dataframe if column in d.value.columns), None)


def test_the_page_shows_check_rates_fields_and_an_items_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    providers = tmp_path / "providers.yaml"
    providers.write_text("endpoints:\n  quick: {kind: sim, latency_scale: 0}\n")
    monkeypatch.setenv("PROMPTLAB_PROVIDERS", str(providers))
    wb = get_workbench()
    run_id = wb.engine.submit(checks_spec(tmp_path))
    assert wb.engine.wait(run_id, timeout=TIMEOUT_S).status == "completed"
    view = wb.runs.view(run_id)
    at = AppTest.from_file(PAGE, default_timeout=TIMEOUT_S).run()
    assert not at.exception
    variants = table_with(at, "truncated")
    assert list(variants["variant"]) == ["json", "plain"]
    json_v = view.variants[0]
    row = variants.iloc[0]
    assert row["completion"] == pytest.approx(json_v.completion_rate)
    assert row["valid"] == pytest.approx(json_v.validity_rate)
    assert row["repaired"] == pytest.approx(json_v.repair_rate)
    assert row["truncated"] == pytest.approx(json_v.truncation_rate)
    assert variants.iloc[1]["completion"] == 1.0
    fields = table_with(at, "most common error")
    assert list(fields["path"]) == [f.path for f in view.field_failures]
    # Open an invalid item: its status and every error path are shown.
    at.selectbox(key=f"items_check_{run_id}").set_value("invalid").run()
    items = next(d for d in at.dataframe if (d.key or "").startswith("items_table_"))
    table = items.value
    assert len(table) == json_v.invalid and set(table["check"]) == {"invalid"}
    index = 0
    at.session_state[items.key] = {"selection": {"rows": [index], "columns": [], "cells": []}}
    at.run()
    assert not at.exception
    errors = wb.runs.item(run_id, table["key"][index]).check_errors
    assert any(shown(e.value) == f"check: invalid, {len(errors)} errors" for e in at.error)
    assert "\n".join(errors) in [c.value for c in at.code]
