"""PROMPTLAB_LOG_FORMAT=json: one JSON object a line that a collector can read, with the
run, item and trace ids where they apply, and no key or masked value in any of it."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import logging.config
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from promptlab.audit.logjson import JsonFormatter, current_log_context, log_context
from promptlab.audit.redact import (
    MASK,
    LogScrubber,
    RedactingFormatter,
    install_log_redaction,
    log_formatter,
)
from promptlab.config import Settings
from promptlab.engine import Engine, parse_spec
from promptlab.engine.testing import ScriptedProvider
from promptlab.errors import ConfigError
from promptlab.fakellm.server import FakeLLMConfig, serve_in_thread
from promptlab.providers.config import EndpointConfig
from promptlab.server.discovery import find_server
from promptlab.store import Store
from tests.cluster_fixtures import Workers, needs_redis
from tests.cluster_fixtures import redis_server as redis_server  # fixtures
from tests.cluster_fixtures import workers as workers

ROOT = Path(__file__).resolve().parent.parent
SECRET = "sk-test-SECRET-0123456789abcdef"
EMAIL = "someone@example.com"
REQUIRED = ("time", "level", "logger", "message")
#: A text log line, as PROMPTLAB_LOG_FORMAT=text writes it.
TEXT_LINE_STARTS = tuple(f"{level} promptlab" for level in ("DEBUG", "INFO", "WARNING", "ERROR"))


def promptlab(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "promptlab", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def json_lines(stderr: str) -> list[dict[str, object]]:
    """The log lines of `stderr` (each one object); no text log line may be among them."""
    assert not [line for line in stderr.splitlines() if line.startswith(TEXT_LINE_STARTS)]
    return [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]


def test_a_runs_json_log_lines_carry_its_id_and_neither_its_key_nor_a_masked_email(
    tmp_path: Path,
) -> None:
    # Every request fails with a 400 echoing the key: after 50 items the run logs an
    # alert naming the variant, whose name holds the key and an email. The run stops at
    # the 20th refusal, but slow answers keep all 64 first requests in flight till then.
    with serve_in_thread(FakeLLMConfig(port=0, echo_auth_rate=1.0, latency_ms=200)) as server:
        endpoint = {
            "kind": "openai",
            "base_url": server.openai_base_url,
            "api_key_env": "OPENAI_API_KEY",
            "models": {"*": {"context_window": 8192}},
        }
        providers = tmp_path / "providers.yaml"
        providers.write_text(yaml.safe_dump({"endpoints": {"remote": endpoint}}))
        (tmp_path / "rows.csv").write_text("text\n" + "".join(f"row {i}\n" for i in range(80)))
        variant = {
            "name": f"for {EMAIL} with {SECRET}",
            "model": "remote:gpt-4o-mini",
            "messages": [{"role": "user", "content": "{{ text }}"}],
        }
        spec = tmp_path / "spec.yaml"
        spec.write_text(yaml.safe_dump({"dataset": "rows.csv", "variants": [variant]}))
        env = {
            **os.environ,
            "PROMPTLAB_LOG_FORMAT": "json",
            "PROMPTLAB_MASK": "email",
            "PROMPTLAB_PROVIDERS": str(providers),
            "OPENAI_API_KEY": SECRET,
        }
        result = promptlab("run", str(spec), env=env, cwd=tmp_path)
        assert server.stats()["attempts"] > 0  # the key went out, and came back
    assert result.returncode == 1, result.stderr  # the run stopped: every request refused
    run_id = result.stdout.split()[1]
    lines = json_lines(result.stderr)
    assert lines, result.stderr
    for line in lines:
        assert all(isinstance(line.get(field), str) for field in REQUIRED), line
        assert str(line["time"]).endswith("Z") and len(str(line["time"])) == len(
            "2024-01-01T00:00:00.000Z"
        )
    about_run = [line for line in lines if run_id in str(line["message"])]
    assert about_run and all(line["run_id"] == run_id for line in about_run)
    alert = next(line for line in about_run if "alert" in str(line["message"]))
    assert MASK in str(alert["message"]) and "[masked:email]" in str(alert["message"])
    assert "item_key" not in alert  # an alert is about the run, not the item that raised it
    assert SECRET not in result.stderr and "0123456789abcdef" not in result.stderr
    assert EMAIL not in result.stderr


def test_an_adapters_traceback_is_one_line_with_the_run_and_item_and_nothing_secret(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    provider = ScriptedProvider(bug=TypeError(f"echoed {SECRET} for {EMAIL}"))
    endpoints = {"fake": EndpointConfig("fake", "openai", context_windows={"m1": 4000})}
    (tmp_path / "d.csv").write_text("text\n" + "".join(f"row {i}\n" for i in range(5)))
    spec = parse_spec(
        {
            "dataset": str(tmp_path / "d.csv"),
            "variants": [
                {"model": "fake:m1", "messages": [{"role": "user", "content": "{{ text }}"}]}
            ],
        }
    )
    with (
        captured_json_logs() as out,
        Engine(store, endpoints=endpoints, provider_factory=lambda _cfg: provider) as engine,
    ):
        run_id = engine.submit(spec)
        assert engine.wait(run_id, timeout=30).status == "failed"
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    raised = next(line for line in lines if "adapter raised" in line["message"])
    assert raised["run_id"] == run_id and raised["level"] == "ERROR"
    with store.read() as cur:
        keys = {k for (k,) in cur.execute("SELECT idempotency_key FROM results").fetchall()}
    assert raised["item_key"] in keys
    assert "TypeError" in raised["exc"] and "[masked:email]" in raised["exc"]
    assert SECRET not in out.getvalue() and EMAIL not in out.getvalue()


@contextlib.contextmanager
def captured_json_logs() -> Iterator[io.StringIO]:
    """promptlab's records written by the JSON formatter (email masked) into a buffer."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonFormatter(LogScrubber(("email",))))
    logger = logging.getLogger("promptlab")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield out
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def test_the_formatter_scrubs_message_traceback_and_extras(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    try:
        raise ValueError(f"server said: {SECRET}")
    except ValueError:
        record = logging.LogRecord(
            "promptlab.engine",
            logging.ERROR,
            __file__,
            1,
            "failed for %s with %s",
            (EMAIL, SECRET),
            sys.exc_info(),
        )
    record.endpoint = f"remote {SECRET}"
    record.counts = {"sent": 3, "to": [EMAIL]}
    record.item_key = "item-1"
    with log_context(run_id="run_abc", trace_id="0af7651916cd43dd8448eb211c80319c"):
        shown = JsonFormatter(LogScrubber(("email",))).format(record)
    assert "\n" not in shown
    line = json.loads(shown)
    assert line["message"] == f"failed for [masked:email] with {MASK}"
    assert line["level"] == "ERROR" and line["logger"] == "promptlab.engine"
    assert line["run_id"] == "run_abc" and line["item_key"] == "item-1"
    assert line["trace_id"] == "0af7651916cd43dd8448eb211c80319c"
    assert line["endpoint"] == f"remote {MASK}"
    assert line["counts"] == {"sent": 3, "to": ["[masked:email]"]}
    assert "ValueError" in line["exc"] and MASK in line["exc"]
    assert SECRET not in shown and EMAIL not in shown


def test_a_line_outside_any_run_has_no_ids_and_the_context_is_restored() -> None:
    record = logging.LogRecord("promptlab.x", logging.WARNING, __file__, 1, "plain", (), None)
    with log_context(run_id="outer"):
        with log_context(run_id="inner", item_key="k"):
            assert current_log_context() == {"run_id": "inner", "item_key": "k"}
        assert current_log_context() == {"run_id": "outer"}
    line = json.loads(JsonFormatter(LogScrubber()).format(record))
    assert set(line) == {"time", "level", "logger", "message"}


def test_text_stays_the_default_and_masks_too() -> None:
    assert isinstance(log_formatter({}), RedactingFormatter)
    assert isinstance(log_formatter({"PROMPTLAB_LOG_FORMAT": " JSON "}), JsonFormatter)
    text = log_formatter({"PROMPTLAB_MASK": "email"})
    record = logging.LogRecord("promptlab.x", logging.WARNING, __file__, 1, EMAIL, (), None)
    assert text.format(record) == "WARNING promptlab.x: [masked:email]"


def test_installing_again_follows_the_format_asked_for_now() -> None:
    logger = logging.getLogger("promptlab")
    before = list(logger.handlers)
    try:
        install_log_redaction(environ={"PROMPTLAB_LOG_FORMAT": "json"})
        install_log_redaction(environ={})
        ours = [h for h in logger.handlers if isinstance(h.formatter, RedactingFormatter)]
        assert len(ours) == 1 and not any(
            isinstance(h.formatter, JsonFormatter) for h in logger.handlers
        )
    finally:
        for handler in logger.handlers[:]:
            if handler not in before:
                logger.removeHandler(handler)


@pytest.mark.parametrize(("value", "expected"), [(None, "text"), ("", "text"), ("Json", "json")])
def test_the_setting_reads_text_or_json(value: str | None, expected: str) -> None:
    env = {} if value is None else {"PROMPTLAB_LOG_FORMAT": value}
    assert Settings.from_env(env).log_format == expected


def test_any_other_format_is_refused_naming_the_variable_and_the_value(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^PROMPTLAB_LOG_FORMAT: .*'xml'"):
        Settings.from_env({"PROMPTLAB_LOG_FORMAT": "xml"})
    env = {**os.environ, "PROMPTLAB_LOG_FORMAT": "xml"}
    result = promptlab("prompt", "list", env=env, cwd=tmp_path)
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "error: PROMPTLAB_LOG_FORMAT: expected text or json, got 'xml'"
    ]


@needs_redis
def test_a_celery_workers_every_line_is_json(workers: Workers) -> None:
    # Celery prints a banner, Python's warnings (running as root here), its own log lines
    # and, from its signal handlers, a line of its own when it stops.
    workers.extra_env["PROMPTLAB_LOG_FORMAT"] = "json"
    workers.start(1)  # at --loglevel info; waits until it answers a ping
    workers.stop()  # SIGTERM: a warm shutdown
    lines = [json.loads(line) for line in workers.log(0).splitlines()]
    assert all(all(isinstance(line.get(f), str) for f in REQUIRED) for line in lines), lines
    said = {(line["logger"], line["message"]) for line in lines}
    assert any(logger == "celery.apps.worker" and text.endswith(" ready.") for logger, text in said)
    assert ("celery.apps.worker", "worker: Warm shutdown (MainProcess)") in said


def test_serve_prints_only_json_lines_uvicorns_startup_and_access_lines_too(
    tmp_path: Path,
) -> None:
    db = tmp_path / "served.duckdb"
    env = {
        **os.environ,
        "PROMPTLAB_LOG_FORMAT": "json",
        "PROMPTLAB_MASK": "email",
        "OPENAI_API_KEY": SECRET,
    }
    for name in ("PROMPTLAB_SERVER", "PROMPTLAB_TOKEN"):
        env.pop(name, None)
    out, err = (tmp_path / "stdout").open("wb"), (tmp_path / "stderr").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "promptlab", "--db", str(db), "serve", "--port", "0"],
        stdout=out,
        stderr=err,
        env=env,
        cwd=tmp_path,
    )
    try:
        deadline = time.monotonic() + 120  # the interpreter's imports, on a busy machine
        while (info := find_server(db, {})) is None:
            assert proc.poll() is None and time.monotonic() < deadline, "the server did not start"
            time.sleep(0.05)
        # A path naming an email and a key (as a careless client might): refused, and
        # its access line says so with neither in it.
        asked = f"{info.url}/v1/prompts/{EMAIL}?api_key={SECRET}"
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(asked, timeout=30)  # noqa: S310 - loopback
        assert refused.value.code == 401
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(60)
        out.close()
        err.close()
    printed = (tmp_path / "stdout").read_text() + (tmp_path / "stderr").read_text()
    lines = [json.loads(line) for line in printed.splitlines()]
    assert all(all(isinstance(line.get(f), str) for f in REQUIRED) for line in lines), lines
    by_logger: dict[str, list[str]] = {}
    for line in lines:
        by_logger.setdefault(str(line["logger"]), []).append(str(line["message"]))
    assert any(
        text.startswith(f"serving {db} at {info.url}") for text in by_logger["promptlab.cli"]
    )
    assert any(text.startswith("Started server process") for text in by_logger["uvicorn.error"])
    # The API's own access line (uvicorn's logger is shared with Streamlit's server,
    # which empties it): no query string, the path masked, nobody known before the guard.
    (access,) = [line for line in lines if line["logger"] == "promptlab.server.access"]
    assert access["message"] == "GET /v1/prompts/[masked:email] 401"
    assert (access["status"], access["principal"]) == (401, "-")
    assert "uvicorn.access" not in by_logger
    assert SECRET not in printed and EMAIL not in printed
    assert not any("color_message" in line for line in lines)


def test_streamlits_own_loggers_write_json_once_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    import streamlit.logger as streamlit_logger

    from promptlab.ui.jsonlogs import streamlit_logs_as_json

    # Streamlit's hook, restored after: its loggers in this process go back to text.
    monkeypatch.setattr(streamlit_logger, "setup_formatter", streamlit_logger.setup_formatter)
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.setenv("PROMPTLAB_MASK", "email")
    early = streamlit_logger.get_logger("streamlit.promptlab_test_early")
    assert not streamlit_logs_as_json({})  # text unless asked
    monkeypatch.setenv("PROMPTLAB_LOG_FORMAT", "json")
    try:
        assert streamlit_logs_as_json() and streamlit_logs_as_json()  # once, however often
        late = streamlit_logger.get_logger("streamlit.promptlab_test_late")
        streamlit_logger.update_formatter()  # Streamlit reads its config again
        for logger in (early, late):
            out = io.StringIO()
            handlers = [h for h in logger.handlers if isinstance(h, logging.StreamHandler)]
            assert len(handlers) == 1  # Streamlit's one console handler, made again
            handlers[0].setStream(out)
            logger.warning("session for %s with %s", EMAIL, SECRET)
            line = json.loads(out.getvalue())
            assert line["logger"] == logger.name and line["level"] == "WARNING"
            assert line["message"] == f"session for [masked:email] with {MASK}"
            assert isinstance(line["time"], str)
    finally:
        monkeypatch.undo()
        streamlit_logger.update_formatter()


def test_the_app_started_for_json_prints_only_json_lines(tmp_path: Path) -> None:
    # Started as `make run` starts it: the workbench opened and the API served before
    # Streamlit serves (opening it logged through Streamlit's loggers, as text), then
    # Streamlit logs and prints: the server started, where to open it, "Stopping...".
    port, api = _free_port(), _free_port()
    env = {
        **os.environ,
        "PROMPTLAB_LOG_FORMAT": "json",
        "PROMPTLAB_DB": str(tmp_path / "app.duckdb"),
        "PROMPTLAB_SERVE": f"127.0.0.1:{api}",
    }
    out = (tmp_path / "printed").open("wb")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "promptlab.ui.launch",
            "run",
            str(ROOT / "app.py"),
            "--server.port",
            str(port),
            "--server.headless",
            "true",
        ],
        stdout=out,
        stderr=subprocess.STDOUT,
        env=env,
        cwd=ROOT,
    )
    try:
        deadline = time.monotonic() + 120  # the interpreter's imports, on a busy machine
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health") as ok:  # noqa: S310
                    assert ok.read() == b"ok"
                    break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, "no app"
                time.sleep(0.05)
        # The API beside the app writes an access line for every request, not only
        # until Streamlit's own server starts.
        for _ in range(3):
            with pytest.raises(urllib.error.HTTPError):
                urllib.request.urlopen(f"http://127.0.0.1:{api}/v1/health", timeout=30)  # noqa: S310
    finally:
        proc.terminate()
        proc.wait(60)
        out.close()
    printed = (tmp_path / "printed").read_text().splitlines()
    lines = [json.loads(line) for line in printed]  # a text line fails here
    assert all(all(isinstance(line.get(f), str) for f in REQUIRED) for line in lines), lines
    said = [(line["logger"], line["message"]) for line in lines]
    assert said.count(("promptlab.server.access", "GET /v1/health 401")) == 3
    assert ("streamlit", f"URL: http://127.0.0.1:{port}") in said
    assert ("streamlit", "Stopping...") in said
    assert any(str(logger).startswith("streamlit.web") for logger, _ in said)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_uvicorns_defaults_are_json_once_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    """Streamlit's own uvicorn server applies uvicorn's default logging config when it
    starts, which put text handlers on every uvicorn logger in the process (the API's)."""
    import uvicorn
    import uvicorn.config

    from promptlab.audit.logjson import uvicorn_json_defaults

    saved = dict(uvicorn.config.LOGGING_CONFIG)
    try:
        uvicorn_json_defaults()
        config = uvicorn.Config(app=lambda *a: None, use_colors=False, access_log=False)
        config.configure_logging()  # what Streamlit's server does on start
        record = logging.LogRecord("uvicorn.error", logging.ERROR, "", 0, "boom", None, None)
        (handler,) = (
            logging.getLogger("uvicorn.error").handlers or logging.getLogger("uvicorn").handlers
        )
        assert handler.formatter is not None
        assert json.loads(handler.formatter.format(record))["message"] == "boom"
    finally:
        uvicorn.config.LOGGING_CONFIG.clear()
        uvicorn.config.LOGGING_CONFIG.update(saved)
        logging.config.dictConfig(saved)
