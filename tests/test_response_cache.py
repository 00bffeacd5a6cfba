"""The response cache (issue 41, item 3): a second run of a temperature-0 spec sends
nothing and says so; what is eligible, the modes, misses by the version's checks,
masking, keys, latency statistics, and `promptlab cache stats / clear`.

Real parts throughout: fakellm over HTTP with the OpenAI SDK (its `/_stats` counts
what was sent), the CLI, the engine and a DuckDB file per test."""

from __future__ import annotations

import json
import logging
import re
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result

from promptlab.cli import main
from promptlab.cli.cache import CACHE_MODES as CLI_CACHE_MODES
from promptlab.config import Settings
from promptlab.engine import Engine, parse_spec
from promptlab.engine.send.cache import request_key
from promptlab.engine.spec.fields import CACHE_MODES, CacheSpec
from promptlab.engine.testing import ScriptedProvider
from promptlab.errors import SpecError
from promptlab.fakellm.server import RunningServer
from promptlab.providers.base import CompletionRequest
from promptlab.providers.config import EndpointConfig
from promptlab.records.cache import CacheEntry
from promptlab.store import Store
from promptlab.store.audit import AuditLog
from promptlab.store.response_cache import ResponseCacheStore
from tests.fakellm_fixtures import ServerFactory

pytestmark = pytest.mark.timeout(120)

KEY = "sk-live-0123456789abcdefCACHEKEY"
OTHER_KEY = "sk-live-9876543210fedcbaOTHERKEY"
SCHEMA = {"type": "object", "properties": {"label": {"type": "string"}}, "required": ["label"]}


@pytest.fixture
def server(fakellm_factory: ServerFactory) -> RunningServer:
    """A fakellm of this test's own, so its request counter counts this test only."""
    return fakellm_factory(latency_ms=1)


@pytest.fixture
def providers(tmp_path: Path, server: RunningServer, monkeypatch: pytest.MonkeyPatch) -> Path:
    """`remote` in a providers file, aimed at the fakellm, its key in REMOTE_LLM_KEY."""
    path = tmp_path / "providers.yaml"
    endpoint = {
        "kind": "openai",
        "base_url": server.openai_base_url,
        "api_key_env": "REMOTE_LLM_KEY",
        "concurrency": 1,
        "models": {"*": {"context_window": 8192}},
    }
    path.write_text(yaml.safe_dump({"endpoints": {"remote": endpoint}}))
    monkeypatch.setenv("PROMPTLAB_PROVIDERS", str(path))
    monkeypatch.setenv("REMOTE_LLM_KEY", KEY)
    return path


def write_spec(
    tmp_path: Path,
    rows: list[str],
    *,
    cache: Any = "readwrite",
    name: str = "spec",
    temperature: float = 0,
    **variant: Any,
) -> Path:
    dataset = tmp_path / f"{name}.csv"
    dataset.write_text("text\n" + "".join(f"{r}\n" for r in rows))
    spec: dict[str, Any] = {
        "dataset": dataset.name,
        "variants": [
            {
                "name": "v",
                "messages": [{"role": "user", "content": "{{ text }}"}],
                "model": "remote:gpt-4o-mini",
                "params": {"temperature": temperature, "max_tokens": 40},
                **variant,
            }
        ],
    }
    if cache is not None:
        spec["cache"] = cache
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def cli(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def run(spec: Path, *flags: str) -> tuple[str, Result]:
    """`promptlab run SPEC`, which must complete; its run id and result."""
    result = cli("run", str(spec), *flags)
    assert result.exit_code == 0, result.output
    return result.output.split()[1], result


def sent(server: RunningServer) -> int:
    return int(server.stats()["attempts"])


def rows_of(db: Path, sql: str, args: list[Any] | None = None) -> list[tuple[Any, ...]]:
    with Store(db) as store, store.read() as cur:
        return cur.execute(sql, args or []).fetchall()


TEN = [f"ticket {i}" for i in range(10)]


def test_a_second_run_of_a_temperature_0_spec_sends_nothing_and_says_so(
    tmp_path: Path,
    db_path: Path,
    server: RunningServer,
    providers: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spec = write_spec(tmp_path, TEN)
    first, said = run(spec)
    assert sent(server) == 10 and "from the cache" not in said.output
    # Another key for the same endpoint: keys are not in the cache key, so it still hits.
    monkeypatch.setenv("REMOTE_LLM_KEY", OTHER_KEY)
    second, said = run(spec)
    assert sent(server) == 10, "the second run sent requests"
    assert "nothing was sent: all 10 answers came from the cache" in said.output
    assert "attempts 0" in said.output

    results = rows_of(
        db_path,
        "SELECT run_id, row_index, output_text, cost_usd, latency_ms, "
        "coalesce(cache_hit, false) FROM results ORDER BY run_id, row_index",
    )
    answers = {r[1]: r[2] for r in results if r[0] == first}
    hits = [r for r in results if r[0] == second]
    assert len(hits) == 10 and all(r[5] and r[3] == 0 and r[4] is None for r in hits)
    assert {r[1]: r[2] for r in hits} == answers  # the very answers of the first run
    assert not any(r[5] for r in results if r[0] == first)
    assert rows_of(db_path, "SELECT count(*) FROM attempts WHERE run_id = ?", [second]) == [(0,)]
    # The trace says it, and the keys are nowhere in the cache.
    keys = rows_of(db_path, "SELECT idempotency_key FROM results WHERE run_id = ?", [second])
    with Store(db_path) as store:
        events = [e for (key,) in keys for e in AuditLog(store).trace(key) if e.kind == "result"]
    assert len(events) == 10 and all(e.payload.get("cache_hit") is True for e in events)
    stored = rows_of(db_path, "SELECT * FROM response_cache")
    assert len(stored) == 10
    assert not any(
        "0123456789abcdef" in str(v) or "9876543210" in str(v) for row in stored for v in row
    )


def test_the_item_and_its_trace_say_it_came_from_the_cache(
    tmp_path: Path, server: RunningServer, providers: Path
) -> None:
    spec = write_spec(tmp_path, TEN[:2])
    run(spec)
    second, _ = run(spec)
    listed = cli("status", second, "--items")
    key = next(line.split()[0] for line in listed.output.splitlines() if "succeeded" in line)
    shown = cli("status", second, "--item", key)
    assert shown.exit_code == 0, shown.output
    assert "answered from the response cache: not sent, cost $0" in shown.output
    traced = cli("audit", "show", key)
    assert traced.exit_code == 0, traced.output
    assert "answered from the response cache: not sent, cost $0" in traced.output
    assert "the stored result matches the hash its event recorded" in traced.output
    assert cli("audit", "verify").exit_code == 0


def test_above_temperature_0_nothing_is_cached_unless_the_spec_says_any_temperature(
    tmp_path: Path, db_path: Path, server: RunningServer, providers: Path
) -> None:
    warm = write_spec(tmp_path, TEN[:4], temperature=0.7)
    run(warm)
    run(warm)
    assert sent(server) == 8
    assert rows_of(db_path, "SELECT count(*) FROM response_cache") == [(0,)]

    anyway = write_spec(
        tmp_path,
        TEN[:4],
        temperature=0.7,
        name="anyway",
        cache={"mode": "readwrite", "any_temperature": True},
    )
    run(anyway)
    _, said = run(anyway)
    assert sent(server) == 12 and "all 4 answers came from the cache" in said.output


def test_a_seed_makes_a_request_eligible(
    tmp_path: Path, db_path: Path, server: RunningServer, providers: Path
) -> None:
    """`promptlab batch --cache readwrite` at temperature 0.7: the lines with a seed
    are answered from the cache the second time, the others are sent again."""
    lines = [
        {
            "custom_id": f"r{i}",
            "body": {
                "model": "gpt-4o-mini",
                "temperature": 0.7,
                "max_tokens": 30,
                "messages": [{"role": "user", "content": f"question {i}"}],
                **({"seed": 7} if i < 3 else {}),
            },
        }
        for i in range(5)
    ]
    requests = tmp_path / "requests.jsonl"
    requests.write_text("".join(json.dumps(line) + "\n" for line in lines))
    args = ["batch", str(requests), "--endpoint", "remote", "--cache", "readwrite"]
    assert cli(*args).exit_code == 0
    assert sent(server) == 5
    again = cli(*args)
    assert again.exit_code == 0, again.output
    assert sent(server) == 7  # the two without a seed
    assert "3 answers from the cache (not sent, $0)" in again.output


def test_read_does_not_write_and_write_does_not_read(
    tmp_path: Path, db_path: Path, server: RunningServer, providers: Path
) -> None:
    spec = write_spec(tmp_path, TEN[:3], cache=None)  # the spec says nothing: off
    run(spec)
    run(spec, "--cache", "read")
    assert sent(server) == 6
    assert rows_of(db_path, "SELECT count(*) FROM response_cache") == [(0,)]
    write, _ = run(spec, "--cache", "write")
    assert sent(server) == 9
    assert rows_of(db_path, "SELECT count(*) FROM response_cache") == [(3,)]
    run(spec, "--cache", "write")
    assert sent(server) == 12  # write never reads
    read, said = run(spec, "--cache", "read")
    assert sent(server) == 12 and "all 3 answers came from the cache" in said.output
    # The mode given on the command line is stored with the run: a resume uses it.
    spec_of = rows_of(
        db_path, "SELECT run_id, spec FROM runs WHERE run_id IN (?, ?)", [write, read]
    )
    assert {json.loads(s)["cache"] for _, s in spec_of} == {"write", "read"}
    # --cache off over a spec that says readwrite.
    on = write_spec(tmp_path, TEN[:3], name="on")
    run(on, "--cache", "off")
    assert sent(server) == 15


def test_a_cached_answer_that_fails_the_versions_checks_is_a_miss(
    tmp_path: Path,
    db_path: Path,
    server: RunningServer,
    providers: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    spec = write_spec(tmp_path, TEN[:4], output_schema=SCHEMA)
    run(spec)
    assert sent(server) == 4
    # An entry whose output no longer fits the schema (as if it had been stored wrong).
    with Store(db_path) as store, store.transaction() as tx:
        tx.execute(
            "UPDATE response_cache SET output_text = 'not json' WHERE cache_key = "
            "(SELECT min(cache_key) FROM response_cache)"
        )
    with caplog.at_level(logging.WARNING, logger="promptlab.engine.send.cache"):
        second, said = run(spec)
    assert sent(server) == 5  # that one was sent again, the other three were hits
    assert "3 answers from the cache (not sent, $0)" in said.output
    lines = [r.getMessage() for r in caplog.records if "no longer passes" in r.getMessage()]
    assert len(lines) == 1 and "variant v" in lines[0]
    ok = rows_of(
        db_path,
        "SELECT count(*) FROM results WHERE run_id = ? AND "
        "status = 'succeeded' AND check_status = 'valid'",
        [second],
    )
    assert ok == [(4,)]  # nothing lost: the miss was answered by the endpoint
    # Its new answer replaced the entry: a third run is all hits.
    _, said = run(spec)
    assert sent(server) == 5 and "all 4 answers came from the cache" in said.output
    assert rows_of(db_path, "SELECT count(*) FROM response_cache") == [(4,)]

    # The same requests under a version whose rule every answer fails: rules are not
    # sent, so the key is the same, and every cached answer is a miss.
    ruled = write_spec(
        tmp_path,
        TEN[:4],
        name="ruled",
        output_schema=SCHEMA,
        rules=[{"name": "never", "expr": "size(output) < 0"}],
    )
    _, said = run(ruled)
    assert sent(server) == 9 and "from the cache" not in said.output


def test_an_identical_request_later_in_the_same_run_hits(
    tmp_path: Path, server: RunningServer, providers: Path
) -> None:
    """One request at a time (concurrency 1): the third row asks what the first did,
    after its answer came, and is answered from the run's own index."""
    spec = write_spec(tmp_path, ["same question", "another", "same question"])
    _, said = run(spec)
    assert sent(server) == 2
    assert "1 answer from the cache (not sent, $0)" in said.output


def test_cached_outputs_are_masked_like_stored_ones(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PROMPTLAB_MASK", "email")
    monkeypatch.setenv("SCRIPT_KEY", KEY)
    provider = ScriptedProvider(answer=lambda _r: f"write to jane.doe@example.com, key {KEY}")
    endpoint = EndpointConfig(
        "script", "openai", api_key_env="SCRIPT_KEY", context_windows={"m": 4000}
    )
    dataset = tmp_path / "d.csv"
    dataset.write_text("text\na\nb\n")
    spec = parse_spec(
        {
            "dataset": str(dataset),
            "cache": "readwrite",
            "variants": [
                {
                    "messages": [{"role": "user", "content": "{{ text }}"}],
                    "model": "script:m",
                    "params": {"temperature": 0},
                }
            ],
        }
    )
    with Engine(
        store,
        settings=Settings.from_env(),
        endpoints={"script": endpoint},
        provider_factory=lambda _c: provider,
    ) as engine:
        for _ in range(2):
            run_id = engine.submit(spec)
            assert engine.wait(run_id, timeout=30).status == "completed"
    assert sum(provider.calls.values()) == 2  # the second run was all hits
    with store.read() as cur:
        cached = [t for (t,) in cur.execute("SELECT output_text FROM response_cache").fetchall()]
        hits = cur.execute("SELECT output_text FROM results WHERE run_id = ?", [run_id]).fetchall()
    assert len(cached) == 2
    for text in [*cached, *(t for (t,) in hits)]:
        assert "jane.doe@example.com" not in text and "[masked:email]" in text
        assert "0123456789abcdef" not in text


def test_latency_statistics_leave_hits_out_and_say_so(
    tmp_path: Path, db_path: Path, server: RunningServer, providers: Path
) -> None:
    spec = write_spec(tmp_path, TEN[:5])
    first, _ = run(spec)
    second, _ = run(spec)
    shown = cli("metrics", "--run", second)
    assert shown.exit_code == 0, shown.output
    assert "5 answers from the cache are left out of latency (not sent, cost $0)" in shown.output
    from promptlab.workbench import Workbench

    with Workbench.open(Settings.from_env()) as wb:
        (hit_row,) = wb.analysis.metrics(run_id=second)
        (sent_row,) = wb.analysis.metrics(run_id=first)
        versions = wb.analysis.metrics()
        summary = wb.runs.view(second).summary
    assert hit_row.cache_hits == 5 and hit_row.latency_p50_ms is None and hit_row.cost_usd == 0
    assert hit_row.succeeded == 5 and sent_row.cache_hits == 0
    # Across runs, the version's latencies are the first run's alone.
    (version,) = versions
    assert version.finished == 10 and version.cache_hits == 5
    assert version.latency_p50_ms == pytest.approx(sent_row.latency_p50_ms)
    assert summary.cache_hits == 5 and summary.latency_p50_ms is None
    assert "left out of latency" not in cli("metrics", "--run", first).output


def test_cache_stats_and_clear_older_than(
    tmp_path: Path, db_path: Path, server: RunningServer, providers: Path
) -> None:
    run(write_spec(tmp_path, TEN[:3]))
    with Store(db_path) as store:  # an answer kept forty days ago
        old = store.clock.now() - timedelta(days=40)
        entry = CacheEntry(
            "0" * 64,
            "remote",
            "gpt-4o-mini",
            "an old answer",
            3,
            4,
            "stop",
            "m",
            12.0,
            None,
            None,
            None,
            "run_old",
            old,
        )
        assert ResponseCacheStore(store).put([entry]) == 1
    stats = cli("cache", "stats")
    assert stats.exit_code == 0, stats.output
    assert "entries 4" in stats.output and "remote:gpt-4o-mini" in stats.output
    cleared = cli("cache", "clear", "--older-than", "30d")
    assert cleared.exit_code == 0
    assert "removed 1 cache entry stored more than 30d ago" in cleared.output
    assert "entries 3" in cli("cache", "stats").output
    bad = cli("cache", "clear", "--older-than", "soon")
    assert bad.exit_code == 2 and "--older-than" in bad.output
    assert "removed 3 cache entries" in cli("cache", "clear").output
    assert "the response cache is empty" in cli("cache", "stats").output


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("sometimes", "cache: one of off, read, write, readwrite"),
        (True, "cache: one of off, read, write, readwrite"),
        ({"mode": "always"}, "cache: one of off, read, write, readwrite"),
        ({"mode": "read", "any_temperature": "yes"}, "cache.any_temperature: expected true"),
        ({"mode": "read", "ttl": 3}, "cache: unknown field(s) ttl"),
    ],
)
def test_a_bad_cache_value_names_the_field(tmp_path: Path, value: Any, said: str) -> None:
    dataset = tmp_path / "d.csv"
    dataset.write_text("text\na\n")
    variant = {"messages": [{"role": "user", "content": "x"}], "model": "sim:m"}
    data = {"dataset": str(dataset), "cache": value, "variants": [variant]}
    with pytest.raises(SpecError, match="^" + re.escape(said)):
        parse_spec(data)


def test_a_bad_cache_value_is_a_usage_error_at_the_command_line(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, ["a"], cache="sometimes")
    result = cli("run", str(spec))
    assert result.exit_code == 2 and "cache: one of" in result.output
    assert cli("run", str(spec), "--cache", "maybe").exit_code == 2


def test_the_spec_reads_off_as_yaml_does_and_the_modes_agree() -> None:
    assert CLI_CACHE_MODES == CACHE_MODES
    data = yaml.safe_load("cache: off")
    assert data == {"cache": False}
    spec = parse_spec(
        {
            "dataset": "d.csv",
            "cache": False,
            "variants": [{"messages": [{"role": "user", "content": "x"}], "model": "sim:m"}],
        }
    )
    assert spec.cache == CacheSpec()


def test_the_key_holds_what_decides_the_answer_and_nothing_that_changes_between_sends() -> None:
    endpoint = EndpointConfig("e", "openai", base_url="http://127.0.0.1:1/v1", api_key_env="K")
    request = CompletionRequest("m", ({"role": "user", "content": "hi"},), temperature=0)
    key = request_key(endpoint, request)
    same = CompletionRequest(
        "m",
        ({"role": "user", "content": "hi"},),
        temperature=0.0,
        request_id="other",
        item_key="k2",
        attempt=3,
        timeout_s=5,
        deadline=1.0,
    )
    assert request_key(endpoint, same) == key
    other_key_env = EndpointConfig(
        "e", "openai", base_url="http://127.0.0.1:1/v1", api_key_env="OTHER"
    )
    assert request_key(other_key_env, request) == key
    for changed in (
        CompletionRequest("m", ({"role": "user", "content": "hi!"},), temperature=0),
        CompletionRequest("m", ({"role": "user", "content": "hi"},), temperature=0, seed=1),
        CompletionRequest("m", ({"role": "user", "content": "hi"},), temperature=0, sample=1),
        CompletionRequest("m2", ({"role": "user", "content": "hi"},), temperature=0),
    ):
        assert request_key(endpoint, changed) != key
    moved = EndpointConfig("e", "openai", base_url="http://127.0.0.1:2/v1", api_key_env="K")
    assert request_key(moved, request) != key
