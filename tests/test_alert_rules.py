"""deploy/prometheus's alert rules, run by Prometheus's own promtool.

tests/test_deploy_board.py checks that the rules name real series and labels; only
Prometheus's rule engine says whether they fire when they should: a `for`, a range
window, an `or` that drops a label set or a template that renders badly are invisible to
a YAML reader. deploy/prometheus/alerts_test.yml holds the cases (a firing and a quiet
one for every alert); these tests run them, check the example config, and show that the
cases can fail: the gate rule they replaced (`promptlab_limiter_gate_closed == 1`) does.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deb_tools import promtool

PROMTOOL = promtool()
if PROMTOOL is None:
    pytest.skip("promtool not found (`make prometheus` unpacks it)", allow_module_level=True)

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy" / "prometheus"
RULES = DEPLOY / "alerts.yml"
RULE_TESTS = DEPLOY / "alerts_test.yml"
CONFIG = DEPLOY / "prometheus.yml"
#: promtool answers in well under a second; a minute means it hangs.
TIMEOUT_S = 60
#: The gate rule before steady 429s were caught: the gate is seen closed at few scrapes.
OLD_GATE_EXPR = "promptlab_limiter_gate_closed == 1"


def run_promtool(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """promtool's exit status and output together, so a failure can print what it said."""
    assert PROMTOOL is not None
    return subprocess.run(
        [str(PROMTOOL), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        cwd=cwd,
        check=False,
    )


def said(result: subprocess.CompletedProcess[str]) -> str:
    """promtool's output, for an assertion's message."""
    return f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"


def load(path: Path) -> Any:
    """A YAML file as promtool reads it (anchors and aliases resolved)."""
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def test_the_rules_pass_promtool_check() -> None:
    result = run_promtool("check", "rules", RULES)
    assert result.returncode == 0, said(result)


def test_the_rules_unit_tests_pass() -> None:
    result = run_promtool("test", "rules", RULE_TESTS)
    assert result.returncode == 0, said(result)


def test_the_example_config_passes_promtool_check(tmp_path: Path) -> None:
    """promtool check config opens the token files and the rule files it names: a copy
    points at token files made here, with alerts.yml beside it as on a real box."""
    text = CONFIG.read_text(encoding="utf-8")
    jobs = load(CONFIG)["scrape_configs"]
    names = [j["authorization"]["credentials_file"] for j in jobs if "authorization" in j]
    assert len(names) == len(jobs), "a scrape config without a token: /metrics would refuse it"
    for name in names:
        token = tmp_path / Path(name).name
        token.write_text("token-for-the-check\n", encoding="utf-8")
        text = text.replace(name, str(token))
    shutil.copy(RULES, tmp_path / RULES.name)
    config = tmp_path / CONFIG.name
    config.write_text(text, encoding="utf-8")
    result = run_promtool("check", "config", config)
    assert result.returncode == 0, said(result)
    rules = sum(len(g["rules"]) for g in load(RULES)["groups"])
    assert f"SUCCESS: {rules} rules found" in result.stdout, said(result)


def cases_by_alert(tests: dict[str, Any]) -> dict[str, set[bool]]:
    """Each alertname the rule tests evaluate, with whether a case expects it firing
    (True), quiet (False) or both."""
    seen: dict[str, set[bool]] = {}
    for case in tests["tests"]:
        for check in case.get("alert_rule_test") or []:
            fires = bool(check.get("exp_alerts"))
            seen.setdefault(check["alertname"], set()).add(fires)
    return seen


def test_every_alert_has_a_firing_and_a_quiet_case() -> None:
    alerts = [r["alert"] for g in load(RULES)["groups"] for r in g["rules"] if "alert" in r]
    assert len(alerts) == len(set(alerts)) >= 6, alerts
    tests = load(RULE_TESTS)
    assert tests["rule_files"] == [RULES.name]
    seen = cases_by_alert(tests)
    missing = {a: sorted({True, False} - seen.get(a, set())) for a in alerts}
    missing = {a: m for a, m in missing.items() if m}
    assert not missing, f"alerts without a firing (True) or a quiet (False) case: {missing}"
    assert set(seen) <= set(alerts), f"cases for alerts alerts.yml lacks: {set(seen) - set(alerts)}"


GATE_ALERT = "PromptlabLimiterGateClosed"


def gate_rules(expr: str | None) -> dict[str, Any]:
    """alerts.yml with the gate alert's expression replaced by `expr` (None: as it is)."""
    rules = load(RULES)
    found = [r for g in rules["groups"] for r in g["rules"] if r.get("alert") == GATE_ALERT]
    assert len(found) == 1, found
    if expr is not None:
        found[0]["expr"] = expr
    return rules


def gate_cases() -> dict[str, Any]:
    """alerts_test.yml's cases of the gate alert only, so that no other alert's case
    decides whether promtool passes."""
    tests = load(RULE_TESTS)
    tests["tests"] = [
        case
        for case in tests["tests"]
        if {c["alertname"] for c in case.get("alert_rule_test") or []} == {GATE_ALERT}
    ]
    assert len(tests["tests"]) >= 4, "the gate alert's cases are gone"
    tests["rule_files"] = [RULES.name]
    return tests


def run_gate_cases(tmp_path: Path, expr: str | None) -> subprocess.CompletedProcess[str]:
    """The gate cases run by promtool against a copy of the rules with `expr`."""
    folder = tmp_path / ("old" if expr else "current")
    folder.mkdir()
    for path, data in ((RULES, gate_rules(expr)), (RULE_TESTS, gate_cases())):
        (folder / path.name).write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    checked = run_promtool("check", "rules", folder / RULES.name)
    assert checked.returncode == 0, said(checked)
    return run_promtool("test", "rules", folder / RULE_TESTS.name)


def test_the_cases_fail_the_old_gate_rule(tmp_path: Path) -> None:
    """The gate closes for a Retry-After shorter than a scrape interval, so the old rule
    (the gate seen closed at every scrape) missed steady 429s: the cases must say so,
    and pass the current rule, so that it is the expression they fail on."""
    current = run_gate_cases(tmp_path, None)
    assert current.returncode == 0, said(current)
    old = run_gate_cases(tmp_path, OLD_GATE_EXPR)
    assert old.returncode != 0, said(old)
    assert "steady 429s fire although the gate is never seen closed" in old.stderr, said(old)
