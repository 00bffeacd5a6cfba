"""The app serves the API beside its pages (PROMPTLAB_SERVE, what `make run` sets): a run
the CLI starts goes through the app's process and shows on its Runs page (issue 24)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from streamlit.testing.v1 import AppTest

from promptlab.cli import main
from promptlab.facades.audit import AuditFilter
from promptlab.server.discovery import discovery_path, find_server
from promptlab.ui.resources import close_all, get_workbench

PAGE = str(Path(__file__).resolve().parent.parent / "pages" / "runs.py")


def test_a_cli_run_goes_through_the_app_and_shows_on_its_runs_page(
    db_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PROMPTLAB_SERVE", "127.0.0.1:0")
    wb = get_workbench()  # the app's one workbench: it now serves the API too
    server = find_server(db_path)
    assert server is not None and server.url.startswith("http://127.0.0.1:")
    dataset = tmp_path / "rows.csv"
    dataset.write_text("text\n" + "".join(f"row {i}\n" for i in range(5)))
    spec = tmp_path / "from-cli.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                "name": "from-cli",
                "dataset": "rows.csv",
                "variants": [
                    {
                        "name": "v",
                        "messages": [{"role": "user", "content": "Say {{ text }}"}],
                        "model": "sim:fast",
                        "params": {"max_tokens": 16},
                    }
                ],
            }
        )
    )
    # The app holds the database: without the server this command could not open it.
    result = CliRunner().invoke(main, ["run", str(spec), "--quiet"])
    assert result.exit_code == 0, result.output + result.stderr
    run_id = result.stdout.split()[1]
    assert [r.run.run_id for r in wb.runs.list()] == [run_id]  # the app's engine ran it
    # One line on stderr (stdout stays a script's) says which server answered: the app's.
    said = f"through the promptlab server at {server.url} (pid {server.pid}, "
    assert result.stderr.startswith(f"{said}{discovery_path(db_path)})\n"), result.stderr
    # The cache's commands too go through the app, where they were refused (issue 61).
    cache = CliRunner().invoke(main, ["cache", "stats"])
    assert cache.exit_code == 0, cache.output
    assert cache.stdout.startswith("the response cache is empty")
    # Any other command runs inside the app's process too, on its workbench.
    listed = CliRunner().invoke(main, ["status", run_id, "--items", "--limit", "2"])
    assert listed.exit_code == 0, listed.output + listed.stderr
    assert listed.output.count("succeeded") >= 2
    # What a command changes through the server is its caller's, in the audit trail too.
    prompt = tmp_path / "greeting.yaml"
    prompt.write_text(
        yaml.safe_dump(
            {"name": "greeting", "versions": [{"messages": [{"role": "user", "content": "Hi"}]}]}
        )
    )
    monkeypatch.setenv("PROMPTLAB_AUTHOR", "dana")
    added = CliRunner().invoke(main, ["prompt", "add", str(prompt)])
    assert added.exit_code == 0, added.output + added.stderr
    events = wb.audit.events(AuditFilter(kind="prompt_version.created"))
    # The discovery file's token is the app's (a service, "tester") acting for dana.
    assert [e.actor for e in events] == ["tester on behalf of dana"]
    assert wb.prompts.versions("greeting")[0].author == "tester on behalf of dana"
    at = AppTest.from_file(PAGE, default_timeout=30).run()
    assert not at.exception
    assert list(at.dataframe[0].value["run"]) == [run_id]
    close_all()  # the app stops: the API stops first, and its discovery file goes
    assert not discovery_path(db_path).exists()
