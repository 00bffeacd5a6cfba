"""`promptlab cache stats|clear` through the server that owns the database (issue 61):
before, they were refused while a server (or the app) ran; now they print the same as
on the file itself, with one line on stderr naming the server."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.fakellm_fixtures import ServerFactory
from tests.one_door_helpers import assert_same_both_ways, invoke, unserved
from tests.test_server import Served


@pytest.fixture
def cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fakellm_factory: ServerFactory) -> Path:
    """A database whose response cache holds a run's 6 answers."""
    fake = fakellm_factory()
    endpoint = {
        "kind": "openai",
        "base_url": fake.openai_base_url,
        "models": {"*": {"context_window": 8192}},
    }
    providers = tmp_path / "providers.yaml"
    providers.write_text(yaml.safe_dump({"endpoints": {"fake": endpoint}}))
    monkeypatch.setenv("PROMPTLAB_PROVIDERS", str(providers))
    (tmp_path / "rows.csv").write_text("q\n" + "".join(f"question {i}\n" for i in range(6)))
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "name: cached\ndataset: rows.csv\ncache: readwrite\nvariants:\n"
        "  - {name: a, model: 'fake:m', params: {temperature: 0},\n"
        "     messages: [{role: user, content: '{{ q }}'}]}\n"
    )
    db = tmp_path / "cached.duckdb"
    ran = invoke(db, ["run", str(spec), "--quiet"])
    assert ran.exit_code == 0, ran.output
    return db


def test_cache_stats_and_clear_print_the_same_through_a_server(
    cached: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stats = invoke(cached, ["cache", "stats"])
    assert stats.exit_code == 0 and stats.stdout.startswith("entries 6, "), stats.output
    called = assert_same_both_ways(
        cached,
        tmp_path,
        monkeypatch,
        reading=[["cache", "stats"]],
        changing=[
            ["cache", "clear", "--older-than", "30d"],  # none is that old
            ["cache", "clear", "--older-than", "soon"],  # refused: exit 2, one line
            ["cache", "clear"],
            ["cache", "stats"],
        ],
    )
    assert {"GET /v1/cache", "POST /v1/cache/clear"} <= set(called)


def test_a_server_named_by_the_environment_says_so(
    cached: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    alone = invoke(cached, ["cache", "stats"])
    server = Served(cached)
    try:
        found = invoke(cached, ["cache", "stats"])
        monkeypatch.setenv("PROMPTLAB_SERVER", server.info.url)
        monkeypatch.setenv("PROMPTLAB_TOKEN", server.info.token)
        # The environment's server answers for any --db: its own database's cache.
        named = invoke(tmp_path / "elsewhere.duckdb", ["cache", "stats"])
    finally:
        server.stop()
    assert unserved(found, server) == ""
    assert named.stderr == f"through the promptlab server at {server.info.url} (PROMPTLAB_SERVER)\n"
    assert found.stdout == named.stdout == alone.stdout
