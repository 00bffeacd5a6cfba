"""The board that works out of the box (issue 42): deploy/grafana/promptlab.json and
deploy/prometheus/alerts.yml name only series that `/metrics` exports, with labels it
gives them.

Every PromQL expression in the dashboard (panel targets, the endpoint variable's query)
and in the rules is read by a small extractor: the `promptlab_*` series it names, the
labels its matchers name on each, the labels its `by`/`without` clauses group the series
inside their aggregation by, and the labels of its `on`/`ignoring` matching. Each is
checked against a real scrape of the API's `/metrics` taken while a simulated run is
running (the limiter series exist only then) and again after it. The owner's view of
the workers (`promptlab_worker_broker_up`, `promptlab_workers_alive`...), exported only
where calls go through workers, is checked against a scrape of an owner with an
`executor: celery` endpoint and a real Redis (skipped where redis-server is not
installed); the series Prometheus scrapes from the workers themselves (job
"promptlab-workers") against a worker's own exposition (WorkerMetrics).

promtool checks the rules' syntax and behaviour (tests/test_alert_rules.py); this test
checks the names and labels both files use against real scrapes, and their structure."""

from __future__ import annotations

import json
import re
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from starlette.testclient import TestClient

from promptlab.config import Settings
from promptlab.distributed.worker_metrics import WorkerMetrics
from promptlab.server.api import create_app
from promptlab.workbench import Workbench
from tests.cluster_fixtures import RedisServer
from tests.cluster_fixtures import redis_server as redis_server  # fixtures
from tests.conftest import isolate

ROOT = Path(__file__).resolve().parent.parent
DASHBOARD_PATH = ROOT / "deploy" / "grafana" / "promptlab.json"
RULES_PATH = ROOT / "deploy" / "prometheus" / "alerts.yml"
DASHBOARD: dict[str, Any] = json.loads(DASHBOARD_PATH.read_text(encoding="utf-8"))
RULES: dict[str, Any] = yaml.safe_load(RULES_PATH.read_text(encoding="utf-8"))
TOKEN = "board-token-for-tests"
#: Prometheus adds these to every series it scrapes; the exposition never holds them.
TARGET_LABELS = {"instance", "job"}

#: A double-quoted PromQL string (a label value may hold braces and parentheses).
STRING = r'"(?:[^"\\]|\\.)*"'
SERIES = re.compile(rf"\b(promptlab_[a-z_]+)\b(\{{(?:[^}}\"]|{STRING})*\}})?")
MATCHER = re.compile(rf"([A-Za-z_]\w*)\s*(?:=~|!~|!=|=)\s*{STRING}")
GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\(([^()]*)\)")
LABEL_VALUES = re.compile(r"label_values\(\s*(\w+)\s*,\s*(\w+)\s*\)")
#: The workers' series. The owner's among them are exported only by an owner whose calls
#: go through workers (`fleet_exported`): a check naming one the other scrapes lack
#: scrapes such an owner, with a Redis of its own.
FLEET = re.compile(r"promptlab_workers?_")
#: Series of `serve --gateway-relay`'s relay: exported only by an owner relaying.
RELAY = re.compile(r"promptlab_gateway_")


# ---- the extractor -----------------------------------------------------------------------


def matching_parens(expr: str) -> dict[int, int]:
    """Each parenthesis's partner, both ways; parentheses inside strings are text."""
    partners: dict[int, int] = {}
    opened: list[int] = []
    index = 0
    while index < len(expr):
        quoted = re.compile(STRING).match(expr, index)
        if quoted:
            index = quoted.end()
            continue
        if expr[index] == "(":
            opened.append(index)
        elif expr[index] == ")":
            start = opened.pop()
            partners[start], partners[index] = index, start
        index += 1
    assert not opened, f"unbalanced parentheses in {expr!r}"
    return partners


def aggregated(expr: str, clause: re.Match[str], partners: dict[int, int]) -> str:
    """What a `by`/`without` clause groups: the parenthesised argument after it
    (`sum by (x) (ARG)`) or, written the other way, before it (`sum(ARG) by (x)`)."""
    after = clause.end() + len(expr[clause.end() :]) - len(expr[clause.end() :].lstrip())
    if expr[after : after + 1] == "(":
        return expr[after : partners[after] + 1]
    before = len(expr[: clause.start()].rstrip()) - 1
    assert expr[before] == ")", f"no argument beside {clause.group(0)!r} in {expr!r}"
    return expr[partners[before] : before + 1]


def named(expr: str) -> list[tuple[str, set[str]]]:
    """(series, labels its matchers name) for every `promptlab_*` series in `expr`."""
    return [(match[1], set(MATCHER.findall(match[2] or ""))) for match in SERIES.finditer(expr)]


def problems(expr: str, exported: dict[str, set[str]]) -> list[str]:
    """What in `expr` the scrape does not have: a series, or a label on a series."""
    found: list[str] = []

    def check(series: str, labels: set[str], why: str) -> None:
        if series not in exported:
            counter = f" (a counter's samples are {series}_total)" * (f"{series}_total" in exported)
            found.append(f"{series} is not exported{counter}")
            return
        for label in sorted(labels - exported[series] - TARGET_LABELS):
            found.append(f"{series} has no label {label!r} ({why})")

    for series, labels in named(expr):
        check(series, labels, "matcher")
    partners = matching_parens(expr)
    for clause in GROUPING.finditer(expr):
        labels = {word.strip() for word in clause[2].split(",") if word.strip()}
        if clause[1] in ("by", "without"):
            for series, _ in named(aggregated(expr, clause, partners)):
                check(series, labels, clause[1])
            continue
        # Vector matching: each label must be on some side of it.
        everywhere = set().union(*(exported.get(s, set()) for s, _ in named(expr)))
        for label in sorted(labels - everywhere - TARGET_LABELS):
            found.append(f"no series here has label {label!r} ({clause[1]})")
    return found


def panels() -> Iterator[dict[str, Any]]:
    """Every panel of the dashboard, rows' own included (a collapsed row holds its)."""
    for panel in DASHBOARD["panels"]:
        yield panel
        yield from panel.get("panels", [])


def expressions() -> Iterator[tuple[str, str]]:
    """(where, PromQL) of every expression in the dashboard and the rules."""
    for panel in panels():
        for target in panel.get("targets", []):
            yield f"panel {panel['title']!r} {target['refId']}", target["expr"]
    for variable in DASHBOARD["templating"]["list"]:
        if variable["type"] == "query":
            query = variable["query"]
            query = query["query"] if isinstance(query, dict) else query
            # label_values(S, L) asks what `count by (L) (S)` would answer.
            yield f"variable {variable['name']!r}", LABEL_VALUES.sub(r"count by (\2) (\1)", query)
    for group in RULES["groups"]:
        for rule in group["rules"]:
            yield f"rule {rule['alert']}", rule["expr"]


EXPRESSIONS = [pytest.param(expr, id=where) for where, expr in expressions()]


# ---- a real scrape -----------------------------------------------------------------------


def labels_by_sample(text: str) -> dict[str, set[str]]:
    """Each sample name in an exposition (`_total`, `_bucket`... as Prometheus stores
    them) and the label names it carries."""
    exported: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            exported.setdefault(sample.name, set()).update(sample.labels)
    return exported


def merged(*expositions: dict[str, set[str]]) -> dict[str, set[str]]:
    """The sample names of all of them, each with the labels it has in any."""
    together: dict[str, set[str]] = {}
    for exposition in expositions:
        for name, labels in exposition.items():
            together.setdefault(name, set()).update(labels)
    return together


def worker_exported() -> dict[str, set[str]]:
    """What a worker's port serves (Prometheus's job "promptlab-workers") once each of
    its labelled series has been counted: a ticket sent, a send in flight and timed,
    a heartbeat (its tasks are counted from the start)."""
    metrics = WorkerMetrics({"x"})
    metrics.ticket("x", "sent")
    metrics.in_flight.labels("x").inc()
    metrics.send_seconds.labels("x").observe(0.1)
    metrics.heartbeat.set_to_current_time()
    return labels_by_sample(generate_latest(metrics.registry).decode())


def scraper(wb: Workbench) -> Callable[[], str]:
    """`GET /metrics` of `wb`'s API, as Prometheus makes it, at each call."""
    api = TestClient(create_app(wb, TOKEN))

    def scrape() -> str:
        answer = api.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
        assert answer.status_code == 200, answer.text
        return answer.text

    return scrape


@pytest.fixture(scope="module")
def served(demo_db_once: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, set[str]]:
    """What `/metrics` exports of the demo database while the demo run runs once more
    on the simulated model, and after."""
    db = tmp_path_factory.mktemp("board") / "demo.duckdb"
    shutil.copyfile(demo_db_once, db)
    with pytest.MonkeyPatch.context() as monkeypatch:
        isolate(monkeypatch, db)
        with Workbench.open(Settings.from_env().with_db(db)) as wb:
            scrape = scraper(wb)
            spec = wb.runs.load_spec(ROOT / "data/demo/runs/triage-ab.yaml")
            # Its limiter, four times faster than the file's 600 a minute, which only
            # made this wait 7 s: the series are the same.
            faster = {name: replace(cap, rpm=2400) for name, cap in spec.limits.items()}
            run_id = wb.runs.start(replace(spec, limits=faster))
            live = ""
            while "promptlab_limiter_gate_closed{" not in live and wb.runs.is_active(run_id):
                live = scrape()
                time.sleep(0.01)
            assert "promptlab_limiter_gate_closed{" in live, "no scrape saw the run running"
            wb.runs.wait(run_id, 120)
            after = scrape()
    return merged(labels_by_sample(live), labels_by_sample(after))


@pytest.fixture(scope="module")
def exported(served: dict[str, set[str]]) -> dict[str, set[str]]:
    """The owner's scrapes and a worker's: each name is in one or the other."""
    return merged(served, worker_exported())


@pytest.fixture
def fleet_exported(
    redis_server: RedisServer,
    empty_db_once: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> dict[str, set[str]]:
    """What `/metrics` exports of an owner whose providers file sends one endpoint's
    calls through workers (on their own queue) with its broker up: its view of them
    (nothing is sent, so the endpoint's server need not exist)."""
    db = tmp_path / "fleet.duckdb"
    shutil.copyfile(empty_db_once, db)
    isolate(monkeypatch, db)
    providers = tmp_path / "providers.yaml"
    providers.write_text(
        yaml.safe_dump(
            {
                "endpoints": {
                    "fleet": {
                        "kind": "openai",
                        "base_url": "http://127.0.0.1:9/v1",
                        "executor": "celery",
                        "queue": "fleet",
                    }
                }
            }
        )
    )
    monkeypatch.setenv("PROMPTLAB_PROVIDERS", str(providers))
    monkeypatch.setenv("PROMPTLAB_BROKER_URL", redis_server.url)
    with Workbench.open(Settings.from_env()) as wb:
        text = scraper(wb)()
    # The queues' depths are exported only while the broker answers.
    assert "promptlab_worker_broker_up 1.0" in text, text
    return labels_by_sample(text)


@pytest.fixture
def relay_exported(
    redis_server: RedisServer,
    empty_db_once: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> dict[str, set[str]]:
    """What `/metrics` exports of an owner relaying for gateway processes (its broker up)."""
    import redis

    from promptlab.server.gateway_relay import GatewayRelay

    db = tmp_path / "relay.duckdb"
    shutil.copyfile(empty_db_once, db)
    isolate(monkeypatch, db)
    with Workbench.open(Settings.from_env()) as wb:
        app = create_app(wb, TOKEN)
        app.state.relay = GatewayRelay(wb, redis.Redis.from_url(redis_server.url), b"x" * 32)
        answer = TestClient(app).get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    assert "promptlab_gateway_relay_up 1.0" in answer.text, answer.text
    return labels_by_sample(answer.text)


@pytest.mark.parametrize("expr", EXPRESSIONS)
def test_every_series_and_label_named_is_exported(
    expr: str, exported: dict[str, set[str]], request: pytest.FixtureRequest
) -> None:
    assert named(expr), f"names no promptlab series: {expr!r}"
    if any(FLEET.match(s) and s not in exported for s, _ in named(expr)):
        # The owner's view of the workers: a scrape of its own, with a Redis.
        exported = merged(exported, request.getfixturevalue("fleet_exported"))
    if any(RELAY.match(s) and s not in exported for s, _ in named(expr)):
        exported = merged(exported, request.getfixturevalue("relay_exported"))
    assert problems(expr, exported) == []


def test_a_worker_exports_what_its_owner_does_not(fleet_exported: dict[str, set[str]]) -> None:
    """The worker's series and the owner's share no name, so a panel or a rule that
    names one needs no `job` matcher to read only it."""
    worker = worker_exported()
    assert not worker.keys() & fleet_exported.keys()
    assert {"promptlab_workers_alive", "promptlab_worker_queue_depth"} <= fleet_exported.keys()
    assert fleet_exported["promptlab_worker_queue_oldest_seconds"] == {"queue"}
    assert worker["promptlab_worker_send_seconds_bucket"] == {"endpoint", "le"}


def test_the_check_catches_a_wrong_name_or_label(exported: dict[str, set[str]]) -> None:
    good = (
        "histogram_quantile(0.95, sum by (le, endpoint) "
        '(rate(promptlab_request_latency_seconds_bucket{endpoint=~"(a|b)( .x.)?"}[5m])))'
    )
    assert problems(good, exported) == []
    assert problems("rate(promptlab_attempts[5m])", exported) == [
        "promptlab_attempts is not exported (a counter's samples are promptlab_attempts_total)"
    ]
    assert problems("promptlab_run_state", exported) == ["promptlab_run_state is not exported"]
    assert problems('promptlab_runs{status="running"}', exported) == [
        "promptlab_runs has no label 'status' (matcher)"
    ]
    # The grouping applies to what it aggregates, whichever side the clause is on.
    assert problems("sum(promptlab_items_queued) by (endpoint)", exported) == [
        "promptlab_items_queued has no label 'endpoint' (by)"
    ]
    assert problems("sum by (le) (rate(promptlab_store_write_seconds_count[5m]))", exported) == [
        "promptlab_store_write_seconds_count has no label 'le' (by)"
    ]
    assert problems("promptlab_runs > 0 unless on (model) promptlab_items", exported) == [
        "no series here has label 'model' (on)"
    ]


def test_the_board_and_the_rules_read_what_the_issue_asks_for() -> None:
    def names(where: str) -> set[str]:
        return {s for w, e in expressions() if w.startswith(where) for s, _ in named(e)}

    assert names("panel") >= {
        "promptlab_request_latency_seconds_bucket",  # task latency P95
        "promptlab_attempts_total",  # failure rate
        "promptlab_items_queued",  # queue depth
        "promptlab_items_in_flight",
        "promptlab_limiter_rpm",
        "promptlab_limiter_gate_closed",
        "promptlab_throttled_attempts_total",  # 429s
        "promptlab_runs",
        "promptlab_store_write_seconds_bucket",  # writer commit latency
        # The Workers row: the owner's view...
        "promptlab_workers_alive",
        "promptlab_workers_lost",
        "promptlab_worker_broker_up",
        "promptlab_worker_queue_depth",
        "promptlab_worker_queue_oldest_seconds",
        # ...and the workers' own ports.
        "promptlab_worker_tasks_total",
        "promptlab_worker_tickets_total",
        "promptlab_worker_in_flight",
        "promptlab_worker_send_seconds_bucket",
        "promptlab_worker_heartbeat_timestamp_seconds",
    }
    assert names("rule") >= {
        "promptlab_attempts_total",
        "promptlab_runs",
        "promptlab_items",
        "promptlab_limiter_gate_closed",
        "promptlab_workers_lost",
        "promptlab_worker_queue_oldest_seconds",
    }


# ---- the files' structure ------------------------------------------------------------------


def test_the_dashboard_is_a_grafana_dashboard() -> None:
    assert DASHBOARD["schemaVersion"] >= 36 and DASHBOARD["uid"] == "promptlab"
    assert DASHBOARD["refresh"] == "15s"
    assert DASHBOARD["time"] == {"from": "now-1h", "to": "now"}
    variables = {v["name"]: v for v in DASHBOARD["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    every = list(panels())
    assert every and len({p["id"] for p in every}) == len(every)
    for panel in every:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24 and grid["h"] > 0, panel["title"]
        if panel["type"] == "row":
            assert (grid["x"], grid["w"], grid["h"]) == (0, 24, 1), panel["title"]
            assert "targets" not in panel and panel["title"], panel["title"]
            continue
        assert panel["type"] in ("timeseries", "stat"), panel["title"]
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        targets = panel["targets"]
        assert targets, f"panel {panel['title']!r} has no target"
        assert len({t["refId"] for t in targets}) == len(targets), panel["title"]
        assert all(t["expr"].strip() for t in targets), panel["title"]
    # No two panels of the open board cover one cell.
    cells = [
        (x, y)
        for p in DASHBOARD["panels"]
        for x in range(p["gridPos"]["x"], p["gridPos"]["x"] + p["gridPos"]["w"])
        for y in range(p["gridPos"]["y"], p["gridPos"]["y"] + p["gridPos"]["h"])
    ]
    assert len(set(cells)) == len(cells)


def test_the_rules_are_prometheus_alerting_rules() -> None:
    rules = [rule for group in RULES["groups"] for rule in group["rules"]]
    assert all(group["name"] and group["rules"] for group in RULES["groups"])
    assert len({rule["alert"] for rule in rules}) == len(rules) >= 3
    for rule in rules:
        assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}, rule["alert"]
        assert re.fullmatch(r"Promptlab[A-Z]\w+", rule["alert"])
        assert rule["expr"].strip()
        assert re.fullmatch(r"(\d+[smhd])+", rule["for"]), rule["alert"]
        assert rule["labels"]["severity"] in ("info", "warning", "critical"), rule["alert"]
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]
