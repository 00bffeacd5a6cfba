"""What a spec, a file or a link names is shown as text, never as Markdown (issue 20,
item 8): a run name that is a Markdown link shows the link's text literally, on every
page and in every field a user can fill."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from promptlab.data.demo import load_demo_prompts
from promptlab.engine import parse_spec
from promptlab.prompts.registry import Registry
from promptlab.prompts.templates import Template
from promptlab.records import AlertRecord
from promptlab.store.alerts import AlertStore
from promptlab.ui.resources import get_workbench
from promptlab.ui.widgets import escape_markdown
from tests.apptest_helpers import shown

pytestmark = pytest.mark.timeout(60)

PAGES = Path(__file__).resolve().parent.parent / "pages"
TIMEOUT_S = 30
LINK = "[re-enter your API key](http://127.0.0.1:9/x)"
#: Text Markdown, HTML or Streamlit would turn into something else than itself.
HOSTILE = [
    LINK,
    "**urgent** <b>now</b> `code` $x^2$ ~~gone~~ <http://127.0.0.1:9/y>",
    ":material/lock: :red[alert] :smile: :+1: a -> b",
    "# not a heading | www.example.com | 1. not a list | mail me@127.0.0.1.nip.io",
]
#: Left unescaped, each of these forms a link, HTML, emphasis, code, LaTeX, a colour
#: directive or a heading; escaped (`\\[`), it does not.
_SYNTAX = re.compile(r"\]\(|<[A-Za-z/]|\*\*|~~|`|\$|:\w+\[|^#|www\.", re.MULTILINE)
#: Streamlit rewrites these in the text once escapes are resolved (emoji shortcodes,
#: `:material/...:` icons, autolinked URLs and addresses): a word joiner is what keeps
#: them text.
_SHORTHAND = re.compile(
    r":\+1:|:-1:|:[\w-]+:|:material/|://|www\.|@[\w-]+(?:\.[\w-]+)*\.[a-z]", re.IGNORECASE
)


def assert_plain(markdown: str, text: str) -> None:
    """`markdown` displays `text` exactly, with no syntax left live in it."""
    assert text in shown(markdown), markdown
    bare = re.sub(r"\\.", "", markdown)  # escaped characters gone
    assert not _SYNTAX.search(bare), markdown
    resolved = re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", markdown)  # the text Streamlit rewrites
    assert not _SHORTHAND.search(resolved), markdown


def open_page(page: str, **query: str) -> AppTest:
    at = AppTest.from_file(str(PAGES / page), default_timeout=TIMEOUT_S)
    for name, value in query.items():
        at.query_params[name] = value
    at.run()
    assert not at.exception, at.exception
    return at


def finished_run(tmp_path: Path, name: str, variants: tuple[str, ...] = ("a",)) -> str:
    """A completed run on the sim model named `name`, one variant per name given."""
    dataset = tmp_path / "rows.csv"
    dataset.write_text("text\nrow 1\nrow 2\n", encoding="utf-8")
    spec = parse_spec(
        {
            "name": name,
            "dataset": str(dataset),
            "variants": [
                {
                    "name": v,
                    "messages": [{"role": "user", "content": "Say {{ text }}"}],
                    "model": "sim:fast",
                    "params": {"max_tokens": 8},
                }
                for v in variants
            ],
        }
    )
    wb = get_workbench()
    run_id = wb.runs.start(spec)
    assert wb.runs.wait(run_id, timeout=TIMEOUT_S).status == "completed"
    return run_id


def test_escaped_text_breaks_what_streamlit_rewrites_after_escapes() -> None:
    """Streamlit turns `:smile:` into an emoji and `http://...` into a link after escapes
    are resolved: a word joiner keeps them text (as it does for `:material/...:`)."""
    rewritten = [":smile:", ":+1:", ":-1:", "a :thumbs_up: b", ":material/lock:"]
    rewritten += ["see http://127.0.0.1:9/x", "WWW.example.com", "mail a@127.0.0.1.nip.io"]
    for text in rewritten:
        assert_plain(escape_markdown(text), text)
    assert escape_markdown("at 12:30, a: b") == r"at 12\:30, a\: b"  # no joiner needed
    # A version reference is copied from the page: it stays exactly as typed.
    assert "\u2060" not in escape_markdown("saved triage@2.1.0, moved triage@production.")


@pytest.mark.parametrize("name", HOSTILE)
def test_a_run_name_is_text_in_the_runs_heading(tmp_path: Path, name: str) -> None:
    finished_run(tmp_path, name)
    at = open_page("runs.py")
    (heading,) = at.subheader
    assert_plain(heading.value, name)
    assert shown(heading.value) == f"{name} · completed"


def test_a_variant_name_is_text_in_the_item_view_and_alerts(tmp_path: Path) -> None:
    run_id = finished_run(tmp_path, "plain", variants=(LINK,))
    wb = get_workbench()
    key = wb.runs.items(run_id).rows[0].key
    alert = AlertRecord(
        run_id, LINK, "empty_field", f"{LINK}: field 'x' empty", 1, 2, datetime.now(UTC)
    )
    AlertStore(wb.store).add([alert])
    at = open_page("runs.py", run=run_id, item=key)
    (item,) = [c for c in at.caption if "dataset row" in shown(c.value)]
    assert_plain(item.value, f"variant {LINK} (inline:{LINK}")
    (warning,) = at.warning
    assert_plain(warning.value, f"empty_field: {LINK}: field 'x' empty")


@pytest.mark.parametrize("name", HOSTILE[:2])
def test_a_run_named_in_a_link_is_text_in_the_compare_warning(tmp_path: Path, name: str) -> None:
    finished_run(tmp_path, "plain", variants=("a", "b"))
    at = open_page("compare.py", run=name)
    (warning,) = at.warning
    assert_plain(warning.value, f"Run {name} has no results")


def test_file_and_column_names_are_text_on_the_datasets_page(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PROMPTLAB_DEMO", "0")
    column = "**col** [x](http://127.0.0.1:9/c)"
    source = tmp_path / "[report](http:127.0.0.1) *v2*.csv"
    source.write_text(f'text,"{column}"\nhello,u1\n', encoding="utf-8")
    get_workbench().datasets.import_file(source, "upload")
    at = open_page("datasets.py")
    (caption,) = [c for c in at.caption if "rows from" in shown(c.value)]
    assert_plain(caption.value, source.name)
    at.selectbox(key="unit_upload").set_value(column)
    at.button(key="unit_save_upload").click().run()
    assert not at.exception, at.exception
    (saved,) = at.success
    assert_plain(saved.value, f"Unit column: {column}")


def test_a_description_and_variable_help_are_text_on_the_prompts_page(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PROMPTLAB_DEMO", "0")
    monkeypatch.setenv("PROMPTLAB_AUTHOR", "*eve* <i>")
    template = Template.build(
        [{"role": "user", "content": "{{ question }}"}],
        params={"model": "sim:fast"},
        variables={"question": {"type": "string", "maxLength": 100, "description": LINK}},
    )
    get_workbench().prompts.create("hostile", template, description=LINK)
    at = open_page("prompts.py")
    (caption,) = [c for c in at.caption if "latest" in shown(c.value)]
    assert_plain(caption.value, f"{LINK} · latest 1.0.0")
    assert_plain(caption.value, "by *eve* <i>")
    at.session_state["prompt_tab"] = "Preview"  # the variable inputs' tab (a click on it)
    at.run()
    (question,) = [t for t in at.text_input if t.label == "question"]
    assert_plain(question.help, LINK)


def test_variant_names_are_text_on_the_experiments_page(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROMPTLAB_DEMO", "0")
    wb = get_workbench()
    load_demo_prompts(Registry(wb.store))
    name = "x.__y__.z"  # the pattern for variant names allows emphasis
    wb.experiments.add(
        {
            "name": "exp",
            "mode": "all",
            "variants": [
                {"name": name, "prompt": "ticket-triage@production", "weight": 50, "control": True},
                {"name": "b", "prompt": "ticket-triage@staging", "weight": 50},
            ],
        }
    )
    at = open_page("experiments.py")
    (weight,) = [n for n in at.number_input if n.key == f"w_exp_1_{name}"]
    assert_plain(weight.label, f"{name} weight")
    assert re.sub(r"\\.", "", weight.label).count("_") == 0  # no `__` left to embolden
    at.button(key="kill_exp").click().run()
    (confirm,) = at.error
    assert_plain(confirm.value, f"Send every unit of exp to {name} now?")


def test_variant_names_are_text_in_the_compare_charts(tmp_path: Path) -> None:
    """Plotly reads `<a href>` in legends, ticks and hover labels as a live link."""
    name = '<a href="http://127.0.0.1:9/x">re-enter your API key</a> %{y}'
    run_id = finished_run(tmp_path, "plain", variants=(name, "b"))
    at = open_page("compare.py", run=run_id, tab="Charts")
    specs = [json.loads(chart.proto.spec) for chart in at.get("plotly_chart")]
    assert len(specs) == 5
    text = json.dumps(specs)
    assert "<a " not in text and '<a href=\\"' not in text
    assert json.dumps('&lt;a href="http://127.0.0.1:9/x"&gt;')[1:-1] in text
    for spec in specs:
        for trace in spec["data"]:
            assert "127.0.0.1" not in trace.get("hovertemplate", "")  # by reference only
