"""The Prompts page (and the app shell), driven by Streamlit's AppTest on a real database."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from promptlab.facades.prompts import Prompts
from promptlab.prompts.registry import Registry
from promptlab.prompts.templates import Template
from promptlab.store import Store
from tests.apptest_helpers import shown

ROOT = Path(__file__).resolve().parent.parent
APP = str(ROOT / "app.py")
PAGE = str(ROOT / "pages" / "prompts.py")
TIMEOUT_S = 30
#: The session key of the open tab (pages/prompts.py's PROMPT_TAB).
PROMPT_TAB = "prompt_tab"


def open_page(tab: str | None = None) -> AppTest:
    """The page, on `tab` when given (as a click on it does: only the open tab runs)."""
    at = AppTest.from_file(PAGE, default_timeout=TIMEOUT_S)
    if tab is not None:
        at.session_state[PROMPT_TAB] = tab
    at.run()
    assert not at.exception, at.exception
    return at


def open_tab(at: AppTest, tab: str) -> None:
    at.session_state[PROMPT_TAB] = tab
    at.run()
    assert not at.exception, at.exception


def by_label(elements, label):  # type: ignore[no-untyped-def]
    return next(e for e in elements if shown(e.label) == label)


def registry_of(db_path: Path) -> Prompts:
    """The page's own workbench (cached per process) is what the page wrote through."""
    from promptlab.ui.resources import get_workbench

    workbench = get_workbench()
    assert workbench.store.path == db_path
    return workbench.prompts


def test_app_shell_loads_demo_on_first_start(db_path: Path) -> None:
    at = AppTest.from_file(APP, default_timeout=TIMEOUT_S).run()
    assert not at.exception, at.exception
    # Prompts, or Compare once the demo run (started beside this first run) has results.
    assert [t.value for t in at.title] in (["Prompts"], ["Compare"])
    names = {s.name for s in registry_of(db_path).list()}
    assert {"ticket-triage", "product-description", "article-summarizer"} <= names


def test_edit_saves_a_new_version_and_unchanged_edit_says_so(db_path: Path) -> None:
    at = open_page()
    assert by_label(at.selectbox, "Prompt").value == "article-summarizer"
    by_label(at.text_area, "Message 2 (user)").input(
        'Summarize "{{ title }}" in {{ max_words }} words.\n\n{{ article }}'
    )
    by_label(at.text_input, "Commit message").input("Shorter instruction")
    by_label(at.button, "Save new version").click().run()
    assert not at.exception
    assert any("Saved article-summarizer@2.1.0" in shown(s.value) for s in at.success)
    latest = registry_of(db_path).resolve("article-summarizer")
    assert (latest.semver, latest.message, latest.author) == (
        "2.1.0",
        "Shorter instruction",
        "tester",
    )
    # Saving the same content again creates nothing and says so.
    by_label(at.button, "Save new version").click().run()
    assert any("No changes" in i.value for i in at.info)
    assert len(registry_of(db_path).versions("article-summarizer")) == 3


def test_an_edit_keeps_the_version_s_rules_and_drift_threshold(db_path: Path) -> None:
    open_page()  # the demo's prompts
    prompts = registry_of(db_path)
    base = prompts.resolve("article-summarizer").template
    rule = {"expr": "category != 'other' or priority != 'urgent'", "severity": "warning"}
    extras = dataclasses.replace(base, rules=(rule,), drift_threshold=0.3)
    prompts.save_version("article-summarizer", extras, message="rules and a drift threshold")
    at = open_page()
    by_label(at.text_area, "Message 2 (user)").input(
        'Summarize "{{ title }}" in {{ max_words }} words, briefly.\n\n{{ article }}'
    )
    by_label(at.text_input, "Commit message").input("Shorter")
    by_label(at.button, "Save new version").click().run()
    assert not at.exception
    assert [e.value for e in at.error] == []
    latest = prompts.resolve("article-summarizer")
    assert latest.message == "Shorter"
    assert (latest.template.rules, latest.template.drift_threshold) == ((rule,), 0.3)


def test_bad_edit_shows_the_error_and_saves_nothing(db_path: Path) -> None:
    at = open_page()
    by_label(at.text_area, "Message 2 (user)").input("{{ ''.__class__.__mro__ }}")
    by_label(at.button, "Save new version").click().run()
    assert any("__mro__" in shown(e.value) for e in at.error)
    assert len(registry_of(db_path).versions("article-summarizer")) == 2


def test_errors_show_their_text_literally_not_as_markdown() -> None:
    at = open_page()
    by_label(at.text_area, "Message 2 (user)").input("{{ title.__class__ }}")
    by_label(at.button, "Save new version").click().run()
    bodies = [e.value for e in at.error]
    assert any("attribute '__class__' is not allowed" in shown(b) for b in bodies), bodies
    # Markdown would show `__class__` as a bold "class": every underscore is escaped.
    assert not any(re.search(r"(?<!\\)_", b) for b in bodies), bodies


def test_create_a_prompt(db_path: Path) -> None:
    at = open_page()
    by_label(at.text_input, "Name").input("support-reply")
    by_label(at.text_area, "User message").input("Reply to {{ email }}")
    by_label(at.button, "Create prompt").click().run()
    assert not at.exception
    assert any("Created support-reply@1.0.0" in shown(s.value) for s in at.success)
    assert by_label(at.selectbox, "Prompt").value == "support-reply"
    assert registry_of(db_path).resolve("support-reply").template.variable_names == ["email"]


def test_create_refuses_an_existing_name_and_points_to_the_edit_tab(db_path: Path) -> None:
    before = registry_of(db_path)
    description = before.description("ticket-triage")
    count = len(before.versions("ticket-triage"))
    at = open_page()
    by_label(at.text_input, "Name").input("ticket-triage")
    by_label(at.text_input, "Description").input("")
    by_label(at.button, "Create prompt").click().run()
    assert not at.exception, at.exception
    assert not at.success
    errors = [e.value for e in at.error]
    assert any("already exists" in e and "Edit tab" in e for e in errors), errors
    after = registry_of(db_path)
    assert len(after.versions("ticket-triage")) == count
    assert after.description("ticket-triage") == description


def test_creating_the_same_prompt_twice_says_nothing_changed(db_path: Path) -> None:
    at = open_page()
    by_label(at.text_input, "Name").input("support-reply")
    by_label(at.text_input, "Description").input("Answer support email")
    by_label(at.text_area, "User message").input("Reply to {{ email }}")
    by_label(at.button, "Create prompt").click().run()
    assert any("Created support-reply@1.0.0" in shown(s.value) for s in at.success)
    by_label(at.text_input, "Name").input("support-reply")
    by_label(at.text_input, "Description").input("Something else")
    by_label(at.text_area, "User message").input("Reply to {{ email }}")
    by_label(at.button, "Create prompt").click().run()
    assert not at.exception, at.exception
    assert not at.success, [s.value for s in at.success]
    assert any(
        "Nothing changed" in i.value and "support-reply@1.0.0" in shown(i.value) for i in at.info
    )
    registry = registry_of(db_path)
    assert len(registry.versions("support-reply")) == 1
    assert registry.description("support-reply") == "Answer support email"


def test_move_label(db_path: Path) -> None:
    at = open_page("Labels")
    by_label(at.text_input, "Label").input("production")
    by_label(at.selectbox, "Point it at").select("2.0.0")
    by_label(at.button, "Move label").click().run()
    # Production moves only once confirmed (tests/test_first_hour_forms.py has the rest).
    by_label(at.button, "Yes, move production to 2.0.0").click().run()
    assert any("now points at 2.0.0" in shown(s.value) for s in at.success)
    assert registry_of(db_path).labels("article-summarizer")["production"].semver == "2.0.0"


def test_compare_shows_line_diff() -> None:
    at = open_page("Compare")
    assert by_label(at.selectbox, "Version A").value == "1.0.0"
    assert by_label(at.selectbox, "Version B").value == "2.0.0"
    diffs = [c.value for c in at.code if c.language == "diff"]
    assert any("+as three short bullet points." in d for d in diffs)


def test_only_the_open_tab_is_drawn() -> None:
    """A first view draws Edit alone: not History's tables, Compare's highlighted diff
    or Preview's inputs (a fresh browser loads the code of each kind of element drawn)."""
    at = open_page()
    assert [t.label for t in at.tabs] == ["Edit", "History", "Compare", "Labels", "Preview"]
    assert by_label(at.button, "Save new version")
    assert len(at.dataframe) == 1  # the prompts table, above the tabs
    assert not at.code and not at.form[1:]  # no diff, no preview, no label mover
    assert "Version A" not in [s.label for s in at.selectbox]
    open_tab(at, "Compare")
    assert any(c.language == "diff" for c in at.code)
    assert "Save new version" not in [b.label for b in at.button]
    open_tab(at, "History")
    assert len(at.dataframe) == 3 and not at.code  # versions, label moves; no diff


def test_an_edit_outlives_a_look_at_another_tab() -> None:
    at = open_page()
    by_label(at.text_input, "Commit message").input("Half done")
    by_label(at.text_area, "Message 2 (user)").input("Shorter, please: {{ article }}")
    by_label(at.slider, "Temperature").set_value(1.5).run()
    open_tab(at, "Preview")
    assert "Commit message" not in [t.label for t in at.text_input]
    at.run()  # a second run with Edit closed: what Streamlit drops unless kept
    open_tab(at, "Edit")
    assert by_label(at.text_input, "Commit message").value == "Half done"
    assert by_label(at.text_area, "Message 2 (user)").value == "Shorter, please: {{ article }}"
    assert by_label(at.slider, "Temperature").value == 1.5


def test_preview_renders_and_shows_validation_errors_inline() -> None:
    at = open_page("Preview")
    assert any("Sample title" in c.value for c in at.code)
    by_label(at.number_input, "max_words (optional)").set_value(5).run()
    assert any("max_words: 5 is less than the minimum" in shown(e.value) for e in at.error)


def test_prompt_values_stay_literal_in_preview() -> None:
    at = open_page("Preview")
    by_label(at.text_area, "title").input("{{ 7*7 }}").run()
    assert any('"{{ 7*7 }}"' in c.value for c in at.code)


def test_database_locked_by_another_process_shows_one_line(db_path: Path) -> None:
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import duckdb,time; c=duckdb.connect({str(db_path)!r}); "
            "print('ok', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ok"
        at = AppTest.from_file(APP, default_timeout=TIMEOUT_S).run()
        assert any("in use by another process" in e.value for e in at.error)
    finally:
        holder.kill()
        holder.wait()
    # Once the other process is gone, the same database opens normally.
    with Store(db_path) as store:
        assert store.path == db_path


DEEP_TEMPLATE = "{% if a %}" * 5000 + "x" + "{% endif %}" * 5000


@pytest.mark.parametrize(
    ("label", "text", "fragment"),
    [
        ("Message 2 (user)", DEEP_TEMPLATE, "nested more than 40 levels deep"),
        ("Message 2 (user)", "{{ title }}" + "x" * 200_001, "allowed in a message"),
        ("Variable schema (YAML)", "title: &t {type: string, not: *t}", "alias to itself"),
        ("Variable schema (YAML)", "[" * 10_000 + "]" * 10_000, "nested more than 100 levels"),
    ],
)
def test_hostile_edits_show_one_inline_error_and_save_nothing(
    db_path: Path, label: str, text: str, fragment: str
) -> None:
    at = open_page()
    by_label(at.text_area, label).input(text)
    by_label(at.button, "Save new version").click().run()
    assert not at.exception, at.exception
    assert any(fragment in e.value for e in at.error), [e.value for e in at.error]
    assert len(registry_of(db_path).versions("article-summarizer")) == 2


def test_create_form_refuses_a_deep_template_inline(db_path: Path) -> None:
    at = open_page()
    by_label(at.text_input, "Name").input("deep")
    by_label(at.text_area, "User message").input(DEEP_TEMPLATE)
    by_label(at.button, "Create prompt").click().run()
    assert not at.exception, at.exception
    assert any("nested more than 40 levels deep" in e.value for e in at.error)
    assert "deep" not in {s.name for s in registry_of(db_path).list()}


def test_preview_stops_a_runaway_render_inline(db_path: Path) -> None:
    loops = (
        "{% for a in xs %}{% for b in xs %}{% for c in xs %}{% for d in xs %}"
        "{{ d }}{% endfor %}{% endfor %}{% endfor %}{% endfor %}"
    )
    with Store(db_path) as store:
        Registry(store).save_version(
            "loops",
            Template.build(
                [{"role": "user", "content": loops}],
                variables={"xs": {"type": "array", "default": [str(i) for i in range(20)]}},
            ),
            author="tester",
        )
    at = open_page("Preview")
    assert any("more than 100000 loop iterations" in e.value for e in at.error)


def test_a_database_path_that_cannot_be_used_is_one_inline_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    regular = tmp_path / "regular-file"
    regular.write_text("not a database", encoding="utf-8")
    monkeypatch.setenv("PROMPTLAB_DB", str(regular / "x.duckdb"))
    at = AppTest.from_file(PAGE, default_timeout=TIMEOUT_S).run()
    assert not at.exception, at.exception
    assert any("cannot create the folder" in e.value for e in at.error)
