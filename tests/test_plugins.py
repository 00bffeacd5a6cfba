"""Plugins (promptlab/plugins/): the sample package in examples/promptlab-plugin-sample,
installed by `make test`, adds a scorer and a command through the `promptlab`
entry-point group; a spec uses its scorer through the CLI, the API and the app.
PROMPTLAB_PLUGINS picks which load, and a plugin that cannot load or takes a name
already taken is refused in one line while the others load."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result
from promptlab_plugin_sample import overlap
from streamlit.testing.v1 import AppTest

from promptlab.cli import main
from promptlab.errors import SpecError
from promptlab.evaluation.scorers import parse_scorers
from promptlab.plugins.manager import reset_plugins
from promptlab.store import Store
from tests.test_server import Served

ROOT = Path(__file__).resolve().parent.parent
ROWS = 6


@pytest.fixture(autouse=True)
def fresh_plugins() -> Any:
    """Each test sees the plugins its environment picks, loaded anew."""
    reset_plugins()
    yield
    reset_plugins()


def spec(tmp_path: Path) -> dict[str, Any]:
    dataset = tmp_path / "answers.csv"
    lines = [f"Say the word number {i},the word number {i}" for i in range(ROWS)]
    dataset.write_text("text,expected\n" + "\n".join(lines) + "\n", encoding="utf-8")
    messages = [{"role": "user", "content": "{{ text }}"}]
    return {
        "name": "overlap",
        "dataset": str(dataset),
        "expected": "expected",
        "scorers": [
            {"kind": "word_overlap"},
            {"kind": "word_overlap", "name": "passes", "min_share": 0.5},
        ],
        "variants": [
            {"name": "control", "model": "sim:fast", "messages": messages},
            {"name": "careful", "model": "sim:careful", "messages": messages},
        ],
    }


def scored(db: Path, run_id: str) -> list[tuple[str, str, float, float]]:
    """(scorer, output, expected share, stored value) of every result of the run."""
    with Store(db) as store, store.read() as cur:
        rows = cur.execute(
            "SELECT s.scorer, r.output_text, s.value FROM scores s JOIN results r "
            "USING (idempotency_key) WHERE s.run_id = ? ORDER BY 1, 2",
            [run_id],
        ).fetchall()
    expected = {f"the word number {i}" for i in range(ROWS)}
    return [
        (scorer, output, max(overlap(output, e) for e in expected), value)
        for scorer, output, value in rows
    ]


def check_scores(db: Path, run_id: str) -> None:
    found = scored(db, run_id)
    assert {s for s, *_ in found} == {"word_overlap", "passes"}
    assert len(found) == 2 * 2 * ROWS
    for scorer, output, _best, value in found:
        assert value is not None and 0 <= value <= 1, (scorer, output)
        if scorer == "passes":
            assert value in (0.0, 1.0)


def cli_run(db: Path, tmp_path: Path, data: dict[str, Any]) -> Result:
    """`promptlab run --quiet` of the spec `data`, written as YAML into `tmp_path`."""
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return CliRunner().invoke(main, ["--db", str(db), "run", str(path), "--quiet"])


def run_id_of(out: Result) -> str:
    """The run id a `promptlab run` printed."""
    return "run_" + out.output.split("run run_")[1].split()[0]


def test_the_sample_plugin_is_listed_with_its_version_and_hooks() -> None:
    out = CliRunner().invoke(main, ["plugins"])
    assert out.exit_code == 0, out.output
    lines = {line.split()[0]: line.split(maxsplit=2)[1:] for line in out.output.splitlines()[1:]}
    assert lines["promptlab"] == [
        "0.1.0",
        "register_exporters, register_providers, register_scorers",
    ]
    assert lines["sample"] == [
        "0.1.0",
        "register_commands, register_exporters, register_output_checks, register_providers, "
        "register_routes, register_scorers",
    ]
    said = CliRunner().invoke(main, ["overlap", "the cat sat", "a cat sat down"])
    assert (said.exit_code, said.output) == (0, "0.50\n")


def test_a_spec_scores_with_the_plugin_s_scorer_through_the_cli(
    tmp_path: Path, db_path: Path
) -> None:
    out = cli_run(db_path, tmp_path, spec(tmp_path))
    assert out.exit_code == 0, out.output
    check_scores(db_path, run_id_of(out))


def served_run(db: Path, data: dict[str, Any]) -> str:
    """Run a spec through a `promptlab serve` of `db`, to its completion; its id."""
    served = Served(db)
    try:
        status, started = served.call("POST", "/v1/runs", {"spec": data})
        assert status == 201, started
        run_id = str(started["run_id"])
        deadline = time.monotonic() + 120
        while served.call("GET", f"/v1/runs/{run_id}")[1]["status"] != "completed":
            assert time.monotonic() < deadline, "the run did not complete"
            time.sleep(0.05)
    finally:
        served.stop()
    return run_id


def test_a_spec_scores_with_the_plugin_s_scorer_through_the_api(
    tmp_path: Path, db_path: Path
) -> None:
    check_scores(db_path, served_run(db_path, spec(tmp_path)))


def test_the_compare_page_shows_the_plugin_s_score_like_any_other(tmp_path: Path) -> None:
    from promptlab.ui.resources import get_workbench

    wb = get_workbench()
    run_id = wb.runs.start(wb.runs.spec_from_data(spec(tmp_path)))
    assert wb.runs.wait(run_id, timeout=60).status == "completed"
    at = AppTest.from_file(str(ROOT / "pages" / "compare.py"), default_timeout=30)
    at.query_params["run"] = run_id
    at.run()
    assert not at.exception, at.exception
    metrics = list(at.dataframe[0].value["metric"])
    assert {"score: word_overlap", "score: passes"} <= set(metrics)
    # The plugin's export format is offered beside the built-in ones, saying whose.
    picker = next(s for s in at.selectbox if s.label == "Format")
    assert {"CSV", "Parquet", "JSON Lines", "Markdown (sample)"} <= set(picker.options)


def test_a_result_table_exports_in_the_plugin_s_format(tmp_path: Path, db_path: Path) -> None:
    out = cli_run(db_path, tmp_path, spec(tmp_path))
    run_id = run_id_of(out)
    target = tmp_path / "results.md"
    argv = ["--db", str(db_path), "export", "--run", run_id, "--format", "markdown"]
    done = CliRunner().invoke(main, [*argv, "-o", str(target)])
    assert done.exit_code == 0, done.output
    lines = target.read_text(encoding="utf-8").splitlines()
    assert lines[0].startswith("| ") and "output_text" in lines[0] and lines[1].startswith("|---")
    assert len(lines) == 2 + 2 * ROWS  # the header, its rule, a line per result
    # Unknown formats are refused naming every one, the plugin's included.
    bad = CliRunner().invoke(main, [*argv, "--format", "xlsx", "-o", str(tmp_path / "x")])
    assert bad.exit_code != 0
    assert "unknown format 'xlsx': one of csv, parquet, jsonl, markdown" in bad.output


def test_a_plugin_route_is_served_with_the_role_it_declares(db_path: Path) -> None:
    from fastapi.testclient import TestClient

    from promptlab.config import Settings
    from promptlab.server.api import create_app
    from promptlab.workbench import Workbench
    from tests.test_server_roles import _bearer, _tokens

    with (
        Workbench.open(Settings.from_env().with_db(db_path)) as wb,
        TestClient(create_app(wb, "owner-token")) as api,
    ):
        tokens = _tokens(wb)
        url = "/v1/plugins/sample/overlap?output=the cat sat&expected=a cat sat down"
        assert api.get(url).status_code == 401
        answered = api.get(url, headers=_bearer(tokens["viewer"]))
        assert (answered.status_code, answered.json()) == (200, {"share": 0.5})
        refused = api.get(url, headers=_bearer(tokens["gateway"]))
        assert refused.status_code == 403 and "needs viewer" in refused.text
        described = api.get("/openapi.json").json()["paths"]
        assert described["/v1/plugins/sample/overlap"]["get"]["x-required-role"] == "viewer"


def test_a_bad_option_of_a_plugin_scorer_names_its_place() -> None:
    with pytest.raises(SpecError, match=r"scorers\[0\]\.min_share: a share above 0"):
        parse_scorers([{"kind": "word_overlap", "min_share": 2}])
    with pytest.raises(SpecError, match=r"scorers\[0\]: word_overlap takes no pattern"):
        parse_scorers([{"kind": "word_overlap", "pattern": "x"}])


def test_promptlab_plugins_empty_loads_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROMPTLAB_PLUGINS", "")
    reset_plugins()
    with pytest.raises(
        SpecError, match=r"scorers\[0\]\.kind: one of exact, .*judge, got 'word_overlap'"
    ):
        parse_scorers([{"kind": "word_overlap"}])
    # A fresh process: this one's `promptlab` group holds the commands it has seen.
    env = {**os.environ, "PROMPTLAB_PLUGINS": ""}
    command = [sys.executable, "-m", "promptlab", "overlap", "a", "b"]
    missing = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert missing.returncode == 2 and "No such command 'overlap'" in missing.stderr
    listed = _plugins_listing(env)
    assert "sample" not in listed and "promptlab " in listed


def _installed(tmp_path: Path, name: str, module: str, source: str) -> dict[str, str]:
    """A package `name` installed on a path of its own (its dist-info's entry point,
    its module): the environment a process with it installed runs in."""
    (tmp_path / f"{module}.py").write_text(source, encoding="utf-8")
    info = tmp_path / f"{name}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[promptlab]\n{name} = {module}\n")
    return {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"}


def _plugins_listing(env: dict[str, str]) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "promptlab", "plugins"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return done.stdout


def test_a_plugin_that_fails_to_import_is_refused_in_one_line_and_the_rest_load(
    tmp_path: Path,
) -> None:
    env = _installed(tmp_path, "broken", "broken_plugin", "raise ImportError('no such SDK')\n")
    listing = _plugins_listing(env)
    assert "refused: broken: could not be loaded: ImportError: no such SDK" in listing
    assert "\nsample " in listing


@pytest.mark.parametrize(
    ("source", "said"),
    [
        (
            "from promptlab.plugins.hookspecs import hookimpl\n"
            "from promptlab.evaluation.scorers import ScorerKind\n"
            "@hookimpl\n"
            "def register_scorers(register):\n"
            "    register(ScorerKind('exact', lambda *a: 1.0))\n",
            "refused: thief: registers scorer kind 'exact', which promptlab registered",
        ),
        (
            "import click\n"
            "from promptlab.plugins.hookspecs import hookimpl\n"
            "@hookimpl\n"
            "def register_commands(cli):\n"
            "    @cli.command('run')\n"
            "    def run():\n"
            "        pass\n",
            "refused: thief: adds command 'run', which is taken",
        ),
        (
            "from promptlab.plugins.hookspecs import hookimpl\n"
            "from promptlab.server.plugin_routes import PluginRoute\n"
            "@hookimpl\n"
            "def register_routes(register):\n"
            "    register(PluginRoute('GET', '/x', 'root', lambda: {}))\n",
            "refused: thief: its register_routes failed: ValueError: route /x: role 'root' "
            "is not one of ('viewer', 'editor', 'admin')",
        ),
    ],
)
def test_a_plugin_taking_a_name_already_taken_is_refused(
    tmp_path: Path, source: str, said: str
) -> None:
    env = _installed(tmp_path, "thief", "thief_plugin", source)
    listing = _plugins_listing(env) if "command" not in said else ""
    if not listing:  # a command's clash shows once the commands are looked at
        done = subprocess.run(
            [sys.executable, "-m", "promptlab", "--help"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        assert "plugin thief refused: adds command 'run', which is taken" in done.stderr
        return
    assert said in listing and "\nsample " in listing


# ---- a provider of a wire format of its own ------------------------------------------------

SAMPLE_KEY = "sk-sample-0123456789abcdef0123"


def provider_spec(tmp_path: Path, model: str = "tiny-lab:tiny") -> dict[str, Any]:
    dataset = tmp_path / "asks.csv"
    asks = [f"hello {i}" for i in range(ROWS - 1)] + ["slow down please"]
    dataset.write_text("text\n" + "\n".join(asks) + "\n", encoding="utf-8")
    return {
        "name": "sample provider",
        "dataset": str(dataset),
        "retry": {"backoff_base_s": 0.01, "backoff_cap_s": 0.02},
        "variants": [
            {"name": "v", "model": model, "messages": [{"role": "user", "content": "{{ text }}"}]}
        ],
    }


def providers_file(tmp_path: Path, url: str) -> Path:
    path = tmp_path / "providers.yaml"
    endpoint = {"kind": "sample", "base_url": url, "api_key_env": "SAMPLE_KEY"}
    path.write_text(yaml.safe_dump({"endpoints": {"tiny-lab": endpoint}}), encoding="utf-8")
    return path


def outputs(db: Path, run_id: str) -> dict[str, tuple[str, int]]:
    """Each result's output, by the text it was asked, with its attempts."""
    with Store(db) as store, store.read() as cur:
        rows = cur.execute(
            "SELECT r.output_text, r.attempts, rr.row_values FROM results r "
            "JOIN run_rows rr USING (run_id, row_index) WHERE r.run_id = ?",
            [run_id],
        ).fetchall()
    return {yaml.safe_load(values)["text"]: (output, attempts) for output, attempts, values in rows}


def test_a_plugin_provider_answers_a_run_with_the_key_the_providers_file_names(
    tmp_path: Path, db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from promptlab_plugin_sample.fake_server import FakeSampleServer

    from tests.test_engine_secrets import tables_holding

    with FakeSampleServer(key=SAMPLE_KEY) as server:
        monkeypatch.setenv("PROMPTLAB_PROVIDERS", str(providers_file(tmp_path, server.url)))
        monkeypatch.setenv("SAMPLE_KEY", SAMPLE_KEY)
        out = cli_run(db_path, tmp_path, provider_spec(tmp_path))
        assert out.exit_code == 0, out.output
        run_id = run_id_of(out)
        answered = outputs(db_path, run_id)
        assert answered["hello 0"] == ("echo: hello 0", 1)
        # Its 429 went through the engine's retries like any provider's.
        assert answered["slow down please"] == ("echo: slow down please", 2)
        assert set(server.authorizations) == {f"Bearer {SAMPLE_KEY}"}
        assert len(server.authorizations) == ROWS + 1
        assert SAMPLE_KEY not in out.output
    with Store(db_path) as store:
        assert tables_holding(store, "0123456789abcdef") == []


def test_a_plugin_provider_s_errors_are_promptlab_s_error_classes(
    tmp_path: Path, db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from promptlab_plugin_sample.fake_server import FakeSampleServer

    with FakeSampleServer(key="another key") as server:
        monkeypatch.setenv("PROMPTLAB_PROVIDERS", str(providers_file(tmp_path, server.url)))
        monkeypatch.setenv("SAMPLE_KEY", SAMPLE_KEY)
        out = cli_run(db_path, tmp_path, provider_spec(tmp_path))
    # A 401 is an auth error: no item gets past it, so the run stops, saying why.
    assert "stopped: auth: wrong key" in out.output


def test_a_spec_s_own_loopback_endpoint_of_a_plugin_kind_runs_through_the_api(
    tmp_path: Path, db_path: Path
) -> None:
    from promptlab_plugin_sample.fake_server import FakeSampleServer

    with FakeSampleServer() as server:
        data = provider_spec(tmp_path, model="lab:tiny")
        data["endpoints"] = {"lab": {"kind": "sample", "base_url": server.url}}  # keyless
        run_id = served_run(db_path, data)
        assert set(server.authorizations) == {None}  # a spec's endpoint gets no key
    assert outputs(db_path, run_id)["hello 1"] == ("echo: hello 1", 1)


# ---- an output check ------------------------------------------------------------------------


def test_a_plugin_output_check_fails_the_answers_it_finds_a_problem_in(
    tmp_path: Path, db_path: Path
) -> None:
    from promptlab_plugin_sample.fake_server import FakeSampleServer

    with FakeSampleServer() as server:
        dataset = tmp_path / "asks.csv"
        asks = ["write to bob@corp.io", "write to ann@example.org", "say hello", "say bye"]
        dataset.write_text("text\n" + "\n".join(asks) + "\n", encoding="utf-8")
        data = {
            "name": "checked",
            "dataset": str(dataset),
            "endpoints": {"lab": {"kind": "sample", "base_url": server.url}},
            "output_checks": [{"kind": "no_email", "allow": ["example.org"]}],
            "variants": [
                {
                    "name": "v",
                    "model": "lab:tiny",
                    "messages": [{"role": "user", "content": "{{ text }}"}],
                }
            ],
        }
        out = cli_run(db_path, tmp_path, data)
        assert out.exit_code == 0, out.output
        run_id = run_id_of(out)
        warned = {
            **data,
            "name": "warned",
            "output_checks": [{"kind": "no_email", "severity": "warning"}],
        }
        out = cli_run(db_path, tmp_path, warned)
        second = run_id_of(out)
    with Store(db_path) as store, store.read() as cur:
        rows = cur.execute(
            "SELECT r.run_id, json_extract_string(rr.row_values, '$.text'), r.rule_status, "
            "r.rule_errors FROM results r JOIN run_rows rr USING (run_id, row_index) "
            "WHERE r.run_id IN (?, ?)",
            [run_id, second],
        ).fetchall()
    verdicts = {(run, text): (status, errors) for run, text, status, errors in rows}
    # The address the spec allows passes; the other fails the item, saying how many.
    assert verdicts[(run_id, "write to bob@corp.io")][0] == "failed"
    assert "no_email: 1 email address(es) in the output" in str(
        verdicts[(run_id, "write to bob@corp.io")][1]
    )
    assert "bob@corp.io" not in str(verdicts[(run_id, "write to bob@corp.io")][1])
    assert verdicts[(run_id, "write to ann@example.org")][0] == "passed"
    assert verdicts[(run_id, "say hello")][0] == "passed"
    # As a warning it warns, and the item still completes.
    assert verdicts[(second, "write to ann@example.org")][0] == "warned"
    assert verdicts[(second, "say bye")][0] == "passed"


def test_a_bad_output_check_is_refused_naming_its_place() -> None:
    from promptlab.checks.plugged import parse_output_checks

    with pytest.raises(SpecError, match=r"output_checks\[0\]\.kind: one of no_email"):
        parse_output_checks(["nope"])
    with pytest.raises(SpecError, match=r"output_checks\[0\]\.severity: error or warning"):
        parse_output_checks([{"kind": "no_email", "severity": "fatal"}])
    with pytest.raises(SpecError, match=r"output_checks\[0\]: no_email takes no pattern"):
        parse_output_checks([{"kind": "no_email", "pattern": "x"}])
