"""A key that sits in a dataset cell is masked wherever rows are shown (issue 20, item 5):
`dataset show` / `dataset check`, the Datasets page, the facade's row reads, item views,
traces and exports; a run still renders its prompts from the raw row it stored."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from streamlit.testing.v1 import AppTest

from promptlab.cli import main
from promptlab.config import DEMO_DIR
from promptlab.data.demo import load_demo_prompts
from promptlab.engine import parse_spec
from promptlab.fakellm.server import FakeLLMConfig, RunningServer, serve_in_thread
from promptlab.prompts.registry import Registry
from promptlab.store import Store
from promptlab.ui.resources import get_workbench
from promptlab.workbench import Workbench

pytestmark = pytest.mark.timeout(60)

PAGE = str(Path(__file__).resolve().parent.parent / "pages" / "datasets.py")
TIMEOUT_S = 30
#: Credential-shaped: masked whoever it belongs to.
SHAPED = "sk-abcdefghijklmnop1234"
#: The value of a `*_TOKEN` variable in the environment: masked by value, whatever it looks like.
ENV_SECRET = "zq9-hushhush-77"
MASK = "[redacted]"


@pytest.fixture(autouse=True)
def env_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACME_SERVICE_TOKEN", ENV_SECRET)
    monkeypatch.setenv("PROMPTLAB_DEMO", "0")


@pytest.fixture
def keyed_csv(tmp_path: Path) -> Path:
    """Rows a careless user pasted keys into: in free text, and as a plan name."""
    path = tmp_path / "keyed.csv"
    path.write_text(
        "ticket,customer_tier\n"
        f"my key is {SHAPED},pro\n"
        f"the service token is {ENV_SECRET},{SHAPED}\n",
        encoding="utf-8",
    )
    return path


def run_cli(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def assert_masked(text: str) -> None:
    assert SHAPED not in text and ENV_SECRET not in text, text
    assert MASK in text, text


def test_dataset_show_masks_keys_in_cells(keyed_csv: Path) -> None:
    assert run_cli("dataset", "import", str(keyed_csv), "--name", "keyed").exit_code == 0
    result = run_cli("dataset", "show", "keyed")
    assert result.exit_code == 0, result.output
    assert_masked(result.output)
    assert f'"ticket": "my key is {MASK}"' in result.output


def test_dataset_check_masks_keys_in_the_problems_it_lists(keyed_csv: Path) -> None:
    assert run_cli("prompt", "add", str(DEMO_DIR / "ticket-triage.yaml")).exit_code == 0
    assert run_cli("dataset", "import", str(keyed_csv), "--name", "keyed").exit_code == 0
    result = run_cli("dataset", "check", "keyed", "ticket-triage@staging")
    assert result.exit_code == 1
    assert_masked(result.output)
    assert result.output.splitlines()[0] == (
        f"row 2, column customer_tier: '{MASK}' is not one of ['free', 'pro', 'enterprise']"
    )


def test_the_facade_gives_masked_rows_and_the_store_keeps_them_raw(
    keyed_csv: Path, db_path: Path
) -> None:
    with Workbench.open() as wb:
        wb.datasets.import_file(keyed_csv, "keyed")
        preview = wb.datasets.preview("keyed")
        streamed = list(wb.datasets.rows("keyed"))
    assert preview == streamed
    assert_masked(json.dumps(preview))
    with Store(db_path) as store, store.read() as cur:
        stored = [r[0] for r in cur.execute("SELECT row_values FROM dataset_rows").fetchall()]
    assert SHAPED in stored[0] and ENV_SECRET in stored[1]  # a run renders from these


def open_datasets_page() -> AppTest:
    at = AppTest.from_file(PAGE, default_timeout=TIMEOUT_S).run()
    assert not at.exception, at.exception
    return at


def test_the_datasets_page_preview_masks_keys(keyed_csv: Path) -> None:
    get_workbench().datasets.import_file(keyed_csv, "keyed")
    at = open_datasets_page()
    preview = at.dataframe[2].value
    assert list(preview["ticket"]) == [f"my key is {MASK}", f"the service token is {MASK}"]
    assert list(preview["customer_tier"]) == ["pro", MASK]


def test_the_datasets_page_row_check_masks_keys(keyed_csv: Path) -> None:
    load_demo_prompts(Registry(get_workbench().store))
    get_workbench().datasets.import_file(keyed_csv, "keyed")
    at = open_datasets_page()
    at.selectbox(key="check_prompt").set_value("ticket-triage").run()
    at.selectbox(key="check_ref").set_value("staging").run()
    at.button(key="check_rows").click().run()
    assert not at.exception, at.exception
    problems = at.dataframe[-1].value
    assert list(problems["problem"]) == [f"'{MASK}' is not one of ['free', 'pro', 'enterprise']"]


# ---- a run over the keyed rows: sent raw, shown masked ------------------------------


@pytest.fixture
def server() -> Iterator[RunningServer]:
    with serve_in_thread(FakeLLMConfig(port=0, latency_ms=1, record_requests=100)) as running:
        yield running


@pytest.fixture
def keyed_run(tmp_path: Path, keyed_csv: Path, server: RunningServer) -> str:
    spec = parse_spec(
        {
            "name": "keyed",
            "dataset": str(keyed_csv),
            "variants": [
                {
                    "name": "only",
                    "messages": [{"role": "user", "content": "Triage: {{ ticket }}"}],
                    "model": "fake:gpt-4o-mini",
                    "params": {"max_tokens": 8},
                }
            ],
            "endpoints": {"fake": {"kind": "openai", "base_url": server.openai_base_url}},
        }
    )
    with Workbench.open() as wb:
        run_id = wb.runs.start(spec)
        assert wb.runs.wait(run_id, timeout=TIMEOUT_S).status == "completed"
    return run_id


def test_a_run_sends_the_raw_row_and_every_view_of_it_is_masked(
    keyed_run: str, server: RunningServer, tmp_path: Path
) -> None:
    with urllib.request.urlopen(f"{server.base_url}/_requests", timeout=5) as response:
        sent = response.read().decode()
    assert SHAPED in sent and ENV_SECRET in sent  # the prompt was rendered from the raw row
    with Workbench.open() as wb:
        keys = [r.key for r in wb.runs.items(keyed_run).rows]
    for key in keys:
        item = run_cli("status", keyed_run, "--item", key)
        assert item.exit_code == 0, item.output
        assert_masked(item.output)
        trace = run_cli("audit", "show", key, "--json")
        assert trace.exit_code == 0, trace.output
        assert_masked(trace.output)
    for table in ("items", "results", "attempts"):
        target = tmp_path / f"{table}.jsonl"
        exported = run_cli(
            "export", "--run", keyed_run, "--table", table, "--format", "jsonl", "-o", str(target)
        )
        assert exported.exit_code == 0, exported.output
        text = target.read_text(encoding="utf-8")
        assert SHAPED not in text and ENV_SECRET not in text
