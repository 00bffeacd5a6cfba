"""promptlab: the Streamlit app. Run with `make run` (or `streamlit run app.py`)."""

from __future__ import annotations

import streamlit as st

from promptlab.audit.actor import acting_as
from promptlab.errors import DatabaseLockedError, StoreError
from promptlab.ui.jsonlogs import streamlit_logs_as_json
from promptlab.ui.resources import get_settings, get_workbench, settle_heap, start_demo_run
from promptlab.ui.shell import FAVICON_SVG, follow_deep_link, home_page, mark_shell_run
from promptlab.ui.signin import refuse_open_serving, show_signed_in, signed_in_actor
from promptlab.ui.widgets import show_error

# The favicon is an SVG flask, sent in the page as a data: URL: an emoji showed as an
# empty box on machines without an emoji font, and a `:material/...:` one is fetched
# from fonts.gstatic.com by every visitor's browser.
st.set_page_config(page_title="promptlab", page_icon=FAVICON_SVG, layout="wide")
streamlit_logs_as_json()  # PROMPTLAB_LOG_FORMAT=json: Streamlit's own lines too (once)
# Served off loopback (not `make run`'s 127.0.0.1), the app wants sign-in or
# PROMPTLAB_ALLOW_OPEN=1; otherwise each visitor sees one line and nothing is opened.
refuse_open_serving()
# With sign-in configured (an [auth] section in the app's secrets), nothing below runs
# for a visitor who has not signed in; what a signed-in person changes is theirs.
actor = signed_in_actor()

try:
    get_workbench()  # opens the database once per process; loads the demo into an empty one
    start_demo_run()  # ... and runs the demo experiment there, once, in the background
except StoreError as exc:  # in use by another process, or not a usable database file
    icon = ":material/lock:" if isinstance(exc, DatabaseLockedError) else ":material/error:"
    show_error(exc, icon=icon)
    st.stop()

compare = st.Page("pages/compare.py", title="Compare", icon=":material/compare_arrows:")
prompts = st.Page("pages/prompts.py", title="Prompts", icon=":material/edit_note:")
# `/` opens Compare once any run has results, Prompts before that; each page keeps its
# own address (`/prompts`, `/compare?run=...`), the home page only sends the visitor on.
home = home_page(compare, otherwise=prompts, when=get_workbench().analysis.has_results)
pages = [
    home,
    compare,
    prompts,
    st.Page("pages/runs.py", title="Runs", icon=":material/play_circle:"),
    st.Page("pages/datasets.py", title="Datasets", icon=":material/table:"),
    st.Page("pages/experiments.py", title="Experiments", icon=":material/science:"),
    st.Page("pages/review.py", title="Review", icon=":material/rate_review:"),
    st.Page("pages/audit.py", title="Audit", icon=":material/verified:"),
]
navigation = st.navigation(pages)
mark_shell_run()
follow_deep_link()
with st.sidebar:
    st.caption(f"Database: `{get_settings().db_path}`")
    show_signed_in(actor)
with acting_as(actor):
    navigation.run()
settle_heap(navigation.url_path)  # once per page: its first run's heap leaves the GC's walks
