"""Secrets are masked in every message before it is stored, logged or shown."""

from __future__ import annotations

import logging
import sys

import pytest

from promptlab.audit.redact import (
    MASK,
    RedactingFormatter,
    Redactor,
    redact,
    secret_values,
    watch_env,
)

KEY = "sk-proj-abcdefghijklmnop1234"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (f"invalid request from Bearer {KEY}", f"invalid request from Bearer {MASK}"),
        ("Authorization: Bearer abc.def-ghi_jkl", f"Authorization: Bearer {MASK}"),
        ("Incorrect API key: sk-ant-api03-xyzxyzxyz.", f"Incorrect API key: {MASK}."),
        ('{"x-api-key": "my-anthropic-key-123"}', f'{{"x-api-key": "{MASK}"}}'),
        ("api_key=hunter2hunter2 rest", f"api_key={MASK} rest"),
        # Ordinary messages are left alone.
        ("rate limit reached, retry in 2 s", "rate limit reached, retry in 2 s"),
        ("name the key's environment variable in api_key_env", None),
        ("skip-this word is fine", None),
    ],
)
def test_credential_shapes_are_masked(text: str, expected: str | None) -> None:
    assert Redactor([])(text) == (text if expected is None else expected)


def test_values_of_secret_variables_are_masked_whatever_their_shape(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MY_PROVIDER_TOKEN", "plain-looking-value-42")
    monkeypatch.setenv("ODDLY_NAMED", "another-plain-value")
    monkeypatch.setenv("SHORT_KEY", "1")  # too short to mask without blanking digits
    watch_env(["ODDLY_NAMED"])  # a configured endpoint's api_key_env
    text = "echo: plain-looking-value-42 and another-plain-value, page 1"
    assert redact(text) == f"echo: {MASK} and {MASK}, page 1"
    assert "1" not in secret_values({"SHORT_KEY": "1"})


def test_log_records_are_masked_in_message_and_traceback(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "configured-openai-key-999")
    try:
        raise ValueError("server said: configured-openai-key-999")
    except ValueError:
        record = logging.LogRecord(
            "promptlab.engine",
            logging.ERROR,
            __file__,
            1,
            "failed with %s",
            ("configured-openai-key-999",),
            sys.exc_info(),
        )
    shown = RedactingFormatter().format(record)
    assert "configured-openai-key-999" not in shown
    assert MASK in shown and "ValueError" in shown


@pytest.mark.parametrize(
    "text",
    [
        f"invalid request from Bearer {KEY}",
        "Incorrect API key: sk-ant-api03-xyzxyzxyz.",
        '{"x-api-key": "my-anthropic-key-123"}',
        "AUTHORIZATION: BASIC dXNlcjpwYXNzd29yZA==",
        # The Kelvin sign lowers to an ASCII "k" (and the masking regex folds it so):
        # a test on bytes alone would call this clean.
        "s\u212a-abcdefghijklmnop",
        "caf\u00e9 api_key=hunter2hunter2",
        "the secret value itself: s3cr3t-value-0000",
    ],
)
def test_suspects_is_true_whenever_masking_would_change_the_text(text: str) -> None:
    redactor = Redactor(["s3cr3t-value-0000"])
    assert redactor(text) != text
    assert redactor.suspects(text.encode())


@pytest.mark.parametrize("text", ["rate limit reached", "caf\u00e9 au lait", '{"status":"ok"}'])
def test_suspects_is_false_on_text_with_nothing_to_mask(text: str) -> None:
    assert not Redactor(["s3cr3t-value-0000"]).suspects(text.encode())
