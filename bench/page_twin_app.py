"""The bare twin of the app's pages (bench/pages.py --same-elements): Streamlit only.

bench/page_twins.py records what each of the app's pages sent the browser (its page
config, its navigation, each element and block with its data, the query it set, its
fragments) and copies this script beside that record. Served like the floor, this
script draws each page again through Streamlit's own delta generator: the same
elements, in the same places, with the same data, and no promptlab code. It imports
Streamlit and the standard library, nothing else.
"""

from __future__ import annotations

import base64
import pickle
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import streamlit as st
from streamlit.delta_generator import DeltaGenerator
from streamlit.proto.Block_pb2 import Block
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
from streamlit.runtime.scriptrunner_utils.script_run_context import enqueue_message

HERE = Path(__file__).resolve().parent
SVG_PREFIX = "data:image/svg+xml;base64,"
Op = tuple[str, tuple[int, ...], Any, str]


def saved(name: str) -> Any:
    return pickle.loads((HERE / f"{name}.pkl").read_bytes())


def put(parent: DeltaGenerator, element: bytes) -> DeltaGenerator:
    """One element, its proto as recorded (its data, size and width settings), at the
    parent's next place (or in place of the element `parent` stands for)."""
    dg = parent._active_dg
    assert dg._cursor is not None and dg._root_container is not None
    cursor = dg._cursor.lock_element()
    msg = ForwardMsg()
    msg.metadata.delta_path[:] = cursor.delta_path
    msg.delta.new_element.ParseFromString(element)
    enqueue_message(msg)
    return DeltaGenerator(root_container=dg._root_container, cursor=cursor, parent=dg)


def apply(op: Op, dgs: dict[tuple[int, ...], DeltaGenerator]) -> None:
    kind, path, payload, _ = op
    if kind == "query":
        st.query_params.from_dict(parse_qs(payload))
    elif kind == "block":
        dgs[path] = dgs[path[:-1]]._block(Block.FromString(payload))
    else:
        dgs[path] = put(dgs[path] if path in dgs else dgs[path[:-1]], payload)


def replay(ops: list[Op], dgs: dict[tuple[int, ...], DeltaGenerator], every: dict) -> None:
    """The ops in order; a fragment's (from its own container on) inside a fragment."""
    i = 0
    while i < len(ops):
        fragment = ops[i][3]
        if not fragment:
            apply(ops[i], dgs)
            i += 1
            continue
        end = i
        while end < len(ops) and ops[end][3] == fragment:
            end += 1
        run_fragment(ops[i:end], dgs, every.get(fragment))
        i = end


def run_fragment(ops: list[Op], dgs: dict, every: float | None) -> None:
    """st.fragment makes the fragment's container (the first op); while it runs,
    `st._main` writes into that container."""
    base = ops[0][1]

    def body() -> None:
        inner = {base: st._main}
        for op in ops[1:]:
            apply(op, inner)

    with dgs[base[:-1]]:
        st.fragment(body, run_every=every)()


def show(url_path: str) -> None:
    program = saved(f"page_{url_path or 'home'}")
    replay(program["ops"], {(0,): st._main, (1,): st.sidebar}, program["every"])
    if program["switch"] is not None:
        st.switch_page(PAGES[program["switch"]])


def page_function(url_path: str) -> Any:
    def page() -> None:
        show(url_path)

    page.__name__ = f"twin_{url_path or 'home'}"
    return page


shell = saved("shell")
icon = shell["favicon"]
if icon.startswith(SVG_PREFIX):  # given as an SVG text, sent as this same data: URL
    icon = base64.b64decode(icon.removeprefix(SVG_PREFIX)).decode()
st.set_page_config(page_title=shell["title"], page_icon=icon or None, layout=shell["layout"])
PAGES = {
    p["url_path"]: st.Page(
        page_function(p["url_path"]),
        title=p["title"],
        icon=p["icon"] or None,
        url_path=p["url_path"] or None,
        default=p["default"],
        visibility="hidden" if p["hidden"] else "visible",
    )
    for p in shell["pages"]
}
st.navigation(list(PAGES.values()), position=shell["position"]).run()
