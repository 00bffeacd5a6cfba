"""Prompts: browse, create and edit versioned templates; history, diff, labels, preview.

The selected prompt's tabs run one at a time (promptlab/ui/lazy_tabs.py): a first view
draws the Edit tab alone, not History's tables or Compare's highlighted diff.
"""

from __future__ import annotations

import uuid
from typing import Any

import pandas as pd
import streamlit as st

from promptlab.errors import PromptExistsError, PromptlabError, StoreError, VariableError
from promptlab.prompts.files import dump_yaml_mapping, parse_yaml_mapping
from promptlab.prompts.templates import ROLES, Template
from promptlab.records import PromptVersion
from promptlab.ui.flash import flash, show_flash
from promptlab.ui.label_mover import labels_tab
from promptlab.ui.lazy_tabs import open_tab
from promptlab.ui.resources import get_workbench
from promptlab.ui.shell import require_shell
from promptlab.ui.widgets import escape_markdown, show_error, show_messages, variable_inputs
from promptlab.workbench import Workbench

#: The selected prompt's tabs; the open one's label is kept under PROMPT_TAB.
EDIT, HISTORY, COMPARE, LABELS, PREVIEW = "Edit", "History", "Compare", "Labels", "Preview"
PROMPT_TAB = "prompt_tab"
#: Widget values kept while their tab is closed (key prefixes, by tab). A message's role
#: and text need none: its draft holds them.
KEEPS = {
    EDIT: ("model::", "temp::", "topp::", "maxtok::", "vars::", "out::", "commit::", "ver::"),
    COMPARE: ("diff_a::", "diff_b::"),
    PREVIEW: ("prev::", "preview::"),
}
NEW_PROMPT_TEMPLATE = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "{{ question }}"},
]


def prompt_table(wb: Workbench) -> list[str]:
    summaries = wb.prompts.list()
    if summaries:
        st.dataframe(
            pd.DataFrame(
                {
                    "prompt": s.name,
                    "latest": s.latest.semver,
                    "versions": s.version_count,
                    "labels": ", ".join(f"{k} → {v}" for k, v in s.labels.items()),
                    "model": s.latest.template.params["model"],
                    "updated": s.latest.created_at,
                    "description": s.description,
                }
                for s in summaries
            ),
            hide_index=True,
            width="stretch",
        )
    return [s.name for s in summaries]


def create_form(wb: Workbench) -> None:
    # Enter in a field must not create the prompt: only the button submits.
    with st.form("new_prompt", clear_on_submit=False, enter_to_submit=False):
        name = st.text_input("Name", placeholder="support-reply", help="lowercase, digits, - _ .")
        description = st.text_input("Description")
        system = st.text_area("System message", value=NEW_PROMPT_TEMPLATE[0]["content"])
        user = st.text_area("User message", value=NEW_PROMPT_TEMPLATE[1]["content"])
        model = st.text_input("Model", value="sim:careful", help="endpoint:model")
        submitted = st.form_submit_button("Create prompt", type="primary")
    if submitted:
        try:
            messages = [{"role": "system", "content": system}] if system.strip() else []
            template = Template.build(
                [*messages, {"role": "user", "content": user}], params={"model": model}
            )
            result = wb.prompts.create(
                name, template, message="Created in the app", description=description
            )
        except PromptExistsError as exc:
            show_error(f"{exc} in the Edit tab (choose {exc.name} in the Prompt list below).")
            return
        except PromptlabError as exc:
            show_error(exc)
            return
        if result.created:
            flash("top", "success", f"Created {result.version.ref}")
        else:
            flash("top", "info", f"Nothing changed: {result.version.ref} already has this content.")
        st.session_state["prompt_select"] = result.version.prompt_name  # show the prompt
        st.rerun()


def draft_messages(base: PromptVersion) -> list[dict[str, str]]:
    """The editable copy of the base version's messages, kept per base version."""
    key = f"draft::{base.id}"
    if key not in st.session_state:
        st.session_state[key] = [
            {"uid": uuid.uuid4().hex, "role": m.role, "content": m.content, "when": m.when}
            for m in base.template.messages
        ]
    drafts: list[dict[str, str]] = st.session_state[key]
    return drafts


def edit_messages(drafts: list[dict[str, str]]) -> None:
    """A role, a text and a remove button per message, and a button to add one."""
    for index, draft in enumerate(drafts):
        role_col, text_col, remove_col = st.columns([2, 9, 1])
        draft["role"] = role_col.selectbox(
            f"Role {index + 1}",
            ROLES,
            index=ROLES.index(draft["role"]) if draft["role"] in ROLES else 1,
            key=f"role::{draft['uid']}",
        )
        draft["content"] = text_col.text_area(
            f"Message {index + 1} ({draft['role']})",
            value=draft["content"],
            key=f"content::{draft['uid']}",
            height=160,
            help=f"Sent only when `{draft['when']}` has a value (set in the prompt file)."
            if draft.get("when")
            else None,
        )
        if remove_col.button(
            ":material/close:", key=f"remove::{draft['uid']}", help="Remove this message"
        ):
            drafts.pop(index)
            st.rerun()
    if st.button("Add message", icon=":material/add:"):
        last = drafts[-1]["role"] if drafts else "system"
        drafts.append(
            {
                "uid": uuid.uuid4().hex,
                "role": "assistant" if last == "user" else "user",
                "content": "",
            }
        )
        st.rerun()


def edit_params(base: PromptVersion) -> dict[str, Any]:
    """The default params as edited: model, temperature, top p, max tokens."""
    params = base.template.params
    c1, c2, c3, c4 = st.columns(4)
    model = c1.text_input("Model", value=params["model"], key=f"model::{base.id}")
    temperature = c2.slider(
        "Temperature", 0.0, 2.0, float(params["temperature"]), 0.05, key=f"temp::{base.id}"
    )
    top_p = c3.slider("Top p", 0.0, 1.0, float(params["top_p"]), 0.05, key=f"topp::{base.id}")
    max_tokens = c4.number_input(
        "Max tokens", 1, 200_000, int(params["max_tokens"]), key=f"maxtok::{base.id}"
    )
    return {
        "model": model.strip(),
        "temperature": temperature,
        "top_p": top_p,
        "max_tokens": int(max_tokens),
    }


def edit_schemas(base: PromptVersion) -> tuple[str, str]:
    """The variable schema and the output JSON Schema as edited (YAML text)."""
    s1, s2 = st.columns(2)
    variables_text = s1.text_area(
        "Variable schema (YAML)",
        value=dump_yaml_mapping(base.template.variable_refinements()),
        key=f"vars::{base.id}",
        height=200,
        help="Per variable: JSON Schema keywords (type, enum, maxLength, default, ...) and "
        "`required: false`. Variables found in the messages default to required strings.",
    )
    output_text = s2.text_area(
        "Output JSON Schema (YAML, optional)",
        value=dump_yaml_mapping(base.template.output_schema),
        key=f"out::{base.id}",
        height=200,
    )
    return variables_text, output_text


def edit_tab(wb: Workbench, base: PromptVersion) -> None:
    st.caption(
        f"Editing from {escape_markdown(base.ref)}. Saving creates a new version; "
        "the old one never changes."
    )
    drafts = draft_messages(base)
    edit_messages(drafts)
    params = edit_params(base)
    variables_text, output_text = edit_schemas(base)
    m1, m2 = st.columns([3, 1])
    commit_message = m1.text_input(
        "Commit message", key=f"commit::{base.id}", placeholder="What changed and why"
    )
    version = m2.text_input(
        "Version (optional)", key=f"ver::{base.id}", help="Leave empty to bump automatically"
    )
    saved = st.button("Save new version", type="primary", icon=":material/save:")
    show_flash("edit")
    if saved:
        try:
            template = Template.build(
                # `when:` (an optional message) is kept as it was; the YAML file sets it.
                [
                    {"role": d["role"], "content": d["content"], "when": d.get("when")}
                    for d in drafts
                ],
                params=params,
                variables=parse_yaml_mapping(variables_text, "variable schema"),
                output_schema=parse_yaml_mapping(output_text, "output JSON Schema"),
                # Rules and the drift threshold are kept too; the YAML file sets them.
                rules=base.template.rules,
                drift_threshold=base.template.drift_threshold,
            )
            result = wb.prompts.save_version(
                base.prompt_name,
                template,
                message=commit_message.strip(),
                version=version.strip() or None,
            )
        except PromptlabError as exc:
            show_error(exc)
            return
        flash("edit", "success" if result.created else "info", result.describe().capitalize())
        st.rerun()


#: The history table's git column, explained where it is shown.
GIT_HELP = (
    "The git commit the version was added from with `promptlab prompt add` (+: the file "
    "had uncommitted changes); NAME@git:COMMIT names it"
)


def history_tab(wb: Workbench, name: str, versions: list[PromptVersion]) -> None:
    labels: dict[str, list[str]] = {}
    for label, version in wb.prompts.labels(name, versions).items():
        labels.setdefault(version.id, []).append(label)
    st.dataframe(
        pd.DataFrame(
            {
                "version": v.semver,
                "id": v.short_id,
                "git": v.git.short if v.git else "",
                "labels": ", ".join(labels.get(v.id, [])),
                "created": v.created_at,
                "author": v.author,
                "message": v.message,
                "model": v.template.params["model"],
            }
            for v in versions
        ),
        hide_index=True,
        width="stretch",
        column_config={"git": st.column_config.TextColumn(help=GIT_HELP)},
    )
    moves = wb.prompts.label_history(name)
    if moves:
        st.markdown("**Label moves**")
        st.dataframe(
            pd.DataFrame(
                {"label": m.label, "version": m.semver, "moved": m.moved_at, "by": m.actor}
                for m in moves
            ),
            hide_index=True,
            width="stretch",
        )
    st.download_button(
        "Export as YAML",
        wb.prompts.export(name),
        file_name=f"{name}.yaml",
        mime="text/yaml",
        icon=":material/download:",
    )


def compare_tab(wb: Workbench, name: str, versions: list[PromptVersion]) -> None:
    if len(versions) < 2:
        st.info("Only one version so far: save an edit to compare versions.")
        return
    options = [v.semver for v in versions]
    a_col, b_col = st.columns(2)
    ref_a = a_col.selectbox("Version A", options, index=1, key=f"diff_a::{versions[0].id}")
    ref_b = b_col.selectbox("Version B", options, index=0, key=f"diff_b::{versions[0].id}")
    diff = wb.prompts.diff(name, ref_a, ref_b)
    if diff.is_empty:
        st.info("These versions have identical content.")
        return
    for message in diff.messages:
        a_col, b_col = st.columns(2)
        title = f"messages[{message.index}]: {message.status}"
        a_col.markdown(f"**{title}** · A: {message.role_a or '—'}")
        b_col.markdown(f"**{title}** · B: {message.role_b or '—'}")
        old = diff.a.template.messages
        new = diff.b.template.messages
        a_col.code(
            old[message.index].content if message.index < len(old) else "",
            language=None,
            wrap_lines=True,
        )
        b_col.code(
            new[message.index].content if message.index < len(new) else "",
            language=None,
            wrap_lines=True,
        )
        if message.lines:
            st.code("\n".join(message.lines), language="diff")
    changes = [("params", c) for c in diff.params] + [("variables", c) for c in diff.variables]
    if changes:
        st.markdown("**Params and variables**")
        st.dataframe(
            pd.DataFrame(
                {"field": f"{group}.{c.field}", "A": str(c.before), "B": str(c.after)}
                for group, c in changes
            ),
            hide_index=True,
            width="stretch",
        )
    if diff.output_schema:
        st.markdown("**Output schema**")
        st.code("\n".join(diff.output_schema), language="diff")


def preview_tab(name: str, versions: list[PromptVersion]) -> None:
    ref = st.selectbox(
        "Version to preview", [v.semver for v in versions], key=f"prev::{versions[0].id}"
    )
    version = next(v for v in versions if v.semver == ref)
    inputs, output = st.columns([2, 3])
    with inputs:
        st.markdown("**Inputs** (from the variable schema)")
        values: dict[str, Any] = variable_inputs(
            version.template.variables, key=f"preview::{version.id}"
        )
    with output:
        try:
            messages = version.template.render(values)
        except VariableError as exc:
            for problem in exc.problems:
                show_error(problem)
            return
        except PromptlabError as exc:
            show_error(exc)
            return
        show_messages(messages)


require_shell("pages/prompts.py")
st.title("Prompts")
try:
    wb = get_workbench()
except StoreError as exc:  # e.g. PROMPTLAB_DB under a regular file, or not a database
    show_error(exc)
    st.stop()
show_flash("top")
names = prompt_table(wb)
with st.expander("Create a new prompt", expanded=not names, icon=":material/add:"):
    create_form(wb)
if not names:
    st.stop()

selected = st.selectbox("Prompt", names, key="prompt_select")
versions = wb.prompts.versions(selected)
latest = versions[0]
st.caption(
    escape_markdown(  # a description and an author are any text a prompt file gives
        f"{wb.prompts.description(selected) or 'No description.'} · latest {latest.semver} "
        f"({latest.short_id}) by {latest.author}"
    )
)
tabs = {
    EDIT: lambda: edit_tab(wb, latest),
    HISTORY: lambda: history_tab(wb, selected, versions),
    COMPARE: lambda: compare_tab(wb, selected, versions),
    LABELS: lambda: labels_tab(wb, selected, versions),
    PREVIEW: lambda: preview_tab(selected, versions),
}
tab, container = open_tab(list(tabs), key=PROMPT_TAB, keeps=KEEPS)
with container:
    tabs[tab]()
