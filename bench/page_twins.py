"""Bare twins of the app's pages, for `bench/pages.py --same-elements`.

A page's twin is a bare Streamlit page with the same elements and the same data and no
promptlab code. To make one, each page of the app is loaded once in headless Chromium
and every message the server sent on the page's websocket is kept (Streamlit's own
protobuf ForwardMsgs): the page config, the navigation, each element and block with
its place and its data (a dataframe's Arrow bytes, a selectbox's options, a metric's
value...), each query the page set, and each fragment with its pace. `build_twin`
writes them to a folder beside a copy of `page_twin_app.py`, which draws them again,
page by page, in a multipage app with the same navigation and the same addresses.
Where a run goes on to another page (`/` to Compare), the twin's does too.

What the twin leaves out is what promptlab itself does: its imports on first use, its
reads and statistics, its session state, any rerun of its own. What it keeps is what
Streamlit costs for those elements: the same messages, from a Streamlit server, drawn
by the same browser code. Two things a hand-written page would add are left out, both
small: the calls' own marshalling (a few ms for a page of small tables) and widget
registration. Spinners (Streamlit's transient elements) are not replayed: they are gone
by the time a page is done. `fidelity` loads each twin page the same way and says
whether it sent the same messages as the app's page.
"""

from __future__ import annotations

import pickle
import shutil
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from difflib import SequenceMatcher
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
from streamlit.proto.Navigation_pb2 import Navigation
from streamlit.proto.PageConfig_pb2 import PageConfig

if TYPE_CHECKING:
    from playwright.sync_api import Browser

TWIN_APP = Path(__file__).resolve().parent / "page_twin_app.py"
LOOPBACK = ("127.0.0.1", "localhost", "[::1]")
#: After `done`, how long to keep listening for the run's last messages (not timed).
SETTLE_MS = 300
#: When each websocket message reached the page (performance.now()), for `capture`.
ARRIVALS_JS = """
(() => {
  const Native = window.WebSocket;
  window.__plArrivals = [];
  window.WebSocket = class extends Native {
    constructor(...args) {
      super(...args);
      this.addEventListener('message', () => window.__plArrivals.push(performance.now()));
    }
  };
})();
"""
Op = tuple[str, tuple[int, ...], Any, str]


@dataclass(frozen=True)
class Recorded:
    """One load as its browser received it: the server's messages in order, and the
    seconds (page clock) from the first message to the last and from the last to done."""

    messages: list[ForwardMsg]
    sending: float
    after: float


def capture(browser: Browser, url: str, measure_js: str, timeout_ms: int) -> Recorded:
    """Open `url` in a new context, as bench/pages.py's `load` does, until `done`, and
    keep every message the server sent (and when each arrived: this load alone, not a
    timed one, wraps the page's WebSocket). Fails if the page asked for anything off
    loopback."""
    frames: list[bytes] = []
    away: list[str] = []
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    try:
        context.add_init_script(ARRIVALS_JS)
        page = context.new_page()
        page.on("websocket", lambda ws: ws.on("framereceived", lambda f: frames.append(f)))
        page.on("request", lambda r: away.append(r.url) if off_loopback(r.url) else None)
        page.goto(url, wait_until="commit", timeout=timeout_ms)
        done = page.wait_for_function(measure_js, polling="raf", timeout=timeout_ms)
        done_ms = done.json_value()["done"]
        page.wait_for_timeout(SETTLE_MS)
        arrivals = [t for t in page.evaluate("window.__plArrivals") if t <= done_ms]
    finally:
        context.close()
    if away:
        raise RuntimeError(f"{url} asked for addresses off loopback: {away}")
    messages = [ForwardMsg.FromString(f if isinstance(f, bytes) else f.encode()) for f in frames]
    sending = (arrivals[-1] - arrivals[0]) / 1000 if arrivals else 0.0
    after = (done_ms - arrivals[-1]) / 1000 if arrivals else 0.0
    return Recorded(messages, sending, after)


def off_loopback(url: str) -> bool:
    parts = urlsplit(url)
    return parts.scheme in ("http", "https", "ws", "wss") and parts.hostname not in LOOPBACK


def runs_of(messages: Sequence[ForwardMsg]) -> list[list[ForwardMsg]]:
    """Each script run's messages (a run starts with `new_session`)."""
    runs: list[list[ForwardMsg]] = []
    for msg in messages:
        if msg.WhichOneof("type") == "new_session":
            runs.append([])
        elif runs:
            runs[-1].append(msg)
    return runs


def page_of(run: Sequence[ForwardMsg]) -> str:
    """The address (url_pathname, "" for `/`) of the page the run drew."""
    for msg in run:
        if msg.WhichOneof("type") == "navigation":
            nav = msg.navigation
            return next(
                p.url_pathname for p in nav.app_pages if p.page_script_hash == nav.page_script_hash
            )
    raise ValueError("a run without st.navigation")


def program(run: Sequence[ForwardMsg], skipped: Counter[str]) -> dict[str, Any]:
    """A run as the twin replays it: ops (kind, path, payload, fragment id) in order,
    each fragment's pace, and no page switch yet (`build_twin` adds it)."""
    ops: list[Op] = []
    every: dict[str, float] = {}
    for msg in run:
        kind = msg.WhichOneof("type")
        if kind == "auto_rerun":
            every[msg.auto_rerun.fragment_id] = msg.auto_rerun.interval
        elif kind == "page_info_changed":
            ops.append(("query", (), msg.page_info_changed.query_string, ""))
        elif kind == "delta":
            delta, path = msg.delta, tuple(msg.metadata.delta_path)
            which = delta.WhichOneof("type")
            if which == "new_element":
                ops.append(("element", path, delta.new_element.SerializeToString(), ""))
            elif which == "add_block":
                ops.append(("block", path, delta.add_block.SerializeToString(), ""))
            else:
                skipped[which] += 1
                continue
            ops[-1] = (*ops[-1][:3], delta.fragment_id)
    return {"ops": inside_fragments(ops), "every": every, "switch": None}


def inside_fragments(ops: list[Op]) -> list[Op]:
    """A query set between two deltas of one fragment was set by that fragment."""
    out = list(ops)
    for i, (kind, path, payload, _) in enumerate(ops):
        if kind == "query" and 0 < i < len(ops) - 1 and ops[i - 1][3] == ops[i + 1][3]:
            out[i] = (kind, path, payload, ops[i - 1][3])
    return out


def shell_of(messages: Sequence[ForwardMsg]) -> dict[str, Any]:
    """The app's page config and navigation, as the twin's app.py sets them."""
    config = next(m.page_config_changed for m in messages if m.HasField("page_config_changed"))
    nav = next(m.navigation for m in messages if m.HasField("navigation"))
    return {
        "title": config.title,
        "favicon": config.favicon,
        "layout": "wide" if config.layout == PageConfig.WIDE else "centered",
        "position": Navigation.Position.Name(nav.position).lower(),
        "pages": [
            {
                "title": p.page_name,
                "icon": p.icon,
                "url_path": p.url_pathname,
                "default": p.is_default,
                "hidden": p.is_hidden,
            }
            for p in nav.app_pages
        ],
    }


def build_twin(folder: Path, captures: dict[str, list[ForwardMsg]]) -> tuple[Path, Counter[str]]:
    """Write each page's program and the shell to `folder` beside the twin's script;
    return the script and what was not replayed (by delta kind). A page loaded by its
    own address gives its program; one reached only through another (Compare through
    `/`) gets it from that run."""
    folder.mkdir(parents=True, exist_ok=True)
    skipped: Counter[str] = Counter()
    programs: dict[str, dict[str, Any]] = {}
    direct: set[str] = set()
    for address, messages in captures.items():
        runs = runs_of(messages)
        pages = [page_of(run) for run in runs]
        for i, run in enumerate(runs):
            own = pages[i] == address.strip("/")
            if pages[i] in direct and not own:
                continue
            programs[pages[i]] = program(run, skipped)
            if i + 1 < len(runs) and pages[i + 1] != pages[i]:
                programs[pages[i]]["switch"] = pages[i + 1]
                ops = programs[pages[i]]["ops"]
                while ops and ops[-1][0] == "query":  # st.switch_page sets the query
                    ops.pop()
            if own:
                direct.add(pages[i])
    first = next(iter(captures.values()))
    shell = shell_of(first)
    (folder / "shell.pkl").write_bytes(pickle.dumps(shell))
    for page in shell["pages"]:  # a page never loaded draws nothing
        prog = programs.get(page["url_path"], {"ops": [], "every": {}, "switch": None})
        (folder / f"page_{page['url_path'] or 'home'}.pkl").write_bytes(pickle.dumps(prog))
    script = folder / "twin.py"
    shutil.copyfile(TWIN_APP, script)
    return script, skipped


def fidelity(app: Recorded, twin: Recorded) -> str:
    """Whether the twin's load sent what the app's did: its runs' pages, and in each
    run the same elements and blocks at the same places with the same bytes, the same
    queries (fragment ids aside, they name the code); then the page config and the
    navigation's pages. Then how long each server took to send its messages, and the
    browser from the last one to done (one load each: a hint, not a measure)."""
    app_runs, twin_runs = runs_of(app.messages), runs_of(twin.messages)
    notes = []
    if [page_of(r) for r in app_runs] != [page_of(r) for r in twin_runs]:
        notes.append(f"{len(app_runs)} runs, twin {len(twin_runs)}")
    ignored: Counter[str] = Counter()
    want = [op[:3] for run in app_runs for op in program(run, ignored)["ops"]]
    got = [op[:3] for run in twin_runs for op in program(run, ignored)["ops"]]
    matched = SequenceMatcher(None, want, got, autojunk=False).get_matching_blocks()
    differ = max(len(want), len(got)) - sum(block.size for block in matched)
    if differ:
        notes.append(f"{differ} of {len(want)} messages differ")
    if shell_of(app.messages) != shell_of(twin.messages):
        notes.append("page config or navigation differ")
    runs = f"{len(app_runs)} run{'s' * (len(app_runs) > 1)}"
    same = f"{len(want)} messages, {runs}: " + ("; ".join(notes) or "the same")
    return (
        f"{same}; sent in {app.sending:.2f} s, done {app.after:.2f} s later "
        f"(twin {twin.sending:.2f} s, {twin.after:.2f} s)"
    )


def report_twins(loads: dict[str, dict[str, list[Any]]], repeats: int) -> list[str]:
    """`--same-elements`: each page's median `done` beside its twin's; the app's own
    overhead is their ratio (and, steadier on a busy machine, the median of each round's
    ratio: a page and its twin are loaded one after the other). Returns the pages over
    1.2x."""
    floor = statistics.median(x.done for x in loads["floor"]["/"])
    print(f"\nsame elements: each page beside its bare twin, median of {repeats} (done, s)")
    print(
        f"{'page':<13} {'app':>7} {'twin':>7} {'app/twin':>9} {'per round':>10} "
        f"{'app x fl':>9} {'twin x fl':>10}"
    )
    over = []
    for path, runs in loads["app"].items():
        app = statistics.median(x.done for x in runs)
        twin = statistics.median(x.done for x in loads["twin"][path])
        paired = statistics.median(
            a.done / t.done for a, t in zip(runs, loads["twin"][path], strict=True)
        )
        print(
            f"{path:<13} {app:>7.3f} {twin:>7.3f} {app / twin:>8.2f}x {paired:>9.2f}x "
            f"{app / floor:>8.2f}x {twin / floor:>9.2f}x"
        )
        if app / twin > 1.2:
            over.append(f"{path} {app / twin:.2f}x")
    print(f"floor {floor:.3f} s; target every page <= 1.2x its twin: ", end="")
    print(f"over on {', '.join(over)}" if over else "met")
    return over
