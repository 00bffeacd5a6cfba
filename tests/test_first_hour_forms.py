"""Forms that wait (issue 43): no form submits on Enter, the revisions table names the
versions and weights, and the label mover starts on no choice and asks before moving
production. Driven by Streamlit's AppTest on the demo the pages load on first start."""

from __future__ import annotations

from pathlib import Path

from streamlit.testing.v1 import AppTest

from promptlab.ui.resources import get_workbench
from tests.apptest_helpers import shown

ROOT = Path(__file__).resolve().parent.parent
PROMPTS = str(ROOT / "pages" / "prompts.py")
EXPERIMENTS = str(ROOT / "pages" / "experiments.py")
TIMEOUT_S = 30


def open_page(page: str, prompt_tab: str | None = None) -> AppTest:
    """`page`; on Prompts, with `prompt_tab` open (only the open tab is drawn)."""
    at = AppTest.from_file(page, default_timeout=TIMEOUT_S)
    if prompt_tab is not None:
        at.session_state["prompt_tab"] = prompt_tab
    at.run()
    assert not at.exception, at.exception
    return at


def by_label(elements, label):  # type: ignore[no-untyped-def]
    return next(e for e in elements if shown(e.label) == label)


def production() -> str:
    return get_workbench().prompts.labels("article-summarizer")["production"].semver


def enter_submits(at: AppTest) -> dict[str, bool]:
    """Each form of the page and whether Enter in one of its text fields submits it (the
    browser reads this flag; AppTest cannot press Enter)."""
    return {form.key: form.proto.form.enter_to_submit for form in at.form}


# ---- Enter never submits -------------------------------------------------------------


def test_no_form_of_the_prompts_page_submits_on_enter() -> None:
    forms = enter_submits(open_page(PROMPTS)) | enter_submits(open_page(PROMPTS, "Labels"))
    assert set(forms) == {"new_prompt", "label_form::article-summarizer"}
    assert not any(forms.values()), forms


def test_no_form_of_the_experiments_page_submits_on_enter() -> None:
    forms = enter_submits(open_page(EXPERIMENTS))
    assert set(forms) == {"new_experiment", "change_triage-split"}
    assert not any(forms.values()), forms


# ---- the revisions table -------------------------------------------------------------


def test_the_revisions_table_names_each_variants_version_and_weight() -> None:
    at = open_page(EXPERIMENTS)
    at.number_input(key="w_triage-split_1_control").set_value(50.0)
    at.number_input(key="w_triage-split_1_staging").set_value(50.0)
    by_label(at.button, "Save as new revision").click().run()
    by_label(at.button, "Yes, save this revision").click().run()
    assert not at.exception, at.exception
    wb = get_workbench()
    control = wb.experiments.get("triage-split").variant("control").prompt_version_id
    staging = wb.experiments.get("triage-split").variant("staging").prompt_version_id
    semver = {v.id: v.semver for v in wb.prompts.versions("ticket-triage")}
    table = next(
        d.value for d in at.dataframe if "revision" in d.value.columns and "note" in d.value.columns
    )
    assert list(table["revision"]) == [2, 1]
    assert list(table["versions"]) == [
        f"control: ticket-triage@{semver[control]} (50%), "
        f"staging: ticket-triage@{semver[staging]} (50%)",
        f"control: ticket-triage@{semver[control]} (70%), "
        f"staging: ticket-triage@{semver[staging]} (30%)",
    ]


# ---- the label mover -----------------------------------------------------------------


def test_the_label_mover_starts_on_no_version_and_a_click_without_one_moves_nothing() -> None:
    at = open_page(PROMPTS, "Labels")
    before = production()
    assert by_label(at.selectbox, "Point it at").value is None
    by_label(at.button, "Move label").click().run()
    assert not at.exception, at.exception
    assert [shown(w.value) for w in at.warning] == [
        "Choose a version in “Point it at”: nothing moved."
    ]
    assert production() == before


def test_moving_production_asks_first_and_moves_only_when_confirmed() -> None:
    at = open_page(PROMPTS, "Labels")
    # Any other label moves on the click, without a question.
    by_label(at.text_input, "Label").input("staging")
    by_label(at.selectbox, "Point it at").select("2.0.0")
    by_label(at.button, "Move label").click().run()
    assert not at.exception, at.exception
    assert get_workbench().prompts.labels("article-summarizer")["staging"].semver == "2.0.0"
    assert not at.warning

    assert production() == "1.0.0"
    by_label(at.text_input, "Label").input("production")
    by_label(at.selectbox, "Point it at").select("2.0.0")
    by_label(at.button, "Move label").click().run()
    assert not at.exception, at.exception
    assert production() == "1.0.0"  # asked, not moved
    assert any(
        "Move article-summarizer@production from 1.0.0 to 2.0.0?" in shown(w.value)
        for w in at.warning
    )
    by_label(at.button, "Keep production where it is").click().run()
    assert production() == "1.0.0"
    assert not any("Move article-summarizer@production" in shown(w.value) for w in at.warning)

    by_label(at.button, "Move label").click().run()
    by_label(at.button, "Yes, move production to 2.0.0").click().run()
    assert not at.exception, at.exception
    assert production() == "2.0.0"
    assert any("now points at 2.0.0" in shown(s.value) for s in at.success)
