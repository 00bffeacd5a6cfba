"""Keep secrets out of everything promptlab stores, logs or shows.

A provider may echo the request's Authorization header in an error body, and an
exception may carry it in its text. Every message passes through `redact` before it
reaches the store, a log line or a page: the values of the environment variables that
hold keys are replaced, and so is anything shaped like a bearer token or an API key.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Iterable, Mapping
from typing import Any

#: What replaces a secret.
MASK = "[redacted]"
#: Environment variables whose names end like this hold secrets. Configured endpoints'
#: `api_key_env` names are added with `watch_env`, whatever they are called.
SECRET_ENV_NAME = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIALS?)$", re.IGNORECASE)
#: Shorter values are not masked: "1" or "true" in a *_TOKEN variable would otherwise
#: blank out every digit of every message. Real API keys are far longer.
MIN_SECRET_CHARS = 8
#: Shapes of credentials, whoever they belong to: `Bearer <token>`, `Basic <b64>`,
#: OpenAI/Anthropic-style `sk-...` keys, and `x-api-key: ...` / `api_key=...` pairs.
SECRET_SHAPES = re.compile(
    r"(?i)\b(?:bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,}"
    r"|\bsk-[A-Za-z0-9_-]{8,}"
    r"|\b(?:x-api-key|api[_-]?key|authorization)([\"']?\s*[:=]\s*[\"']?)[^\s\"',;}]{8,}"
)

#: Substrings (lower case) every SECRET_SHAPES match contains: most outputs have none,
#: and checking for them is ~10x cheaper than running the regex (bench/redaction.py).
_SHAPE_MARKERS = ("bearer", "basic", "sk-", "api-key", "api_key", "apikey", "authorization")
_SHAPE_MARKER_BYTES = tuple(m.encode() for m in _SHAPE_MARKERS)

_watched: set[str] = set()
_watched_lock = threading.Lock()


def watch_env(names: Iterable[str | None]) -> None:
    """Treat the values of these environment variables as secrets from now on."""
    with _watched_lock:
        _watched.update(name for name in names if name)


def secret_values(environ: Mapping[str, str] | None = None) -> list[str]:
    """The secret values to mask, longest first (so a key containing another goes whole)."""
    env = os.environ if environ is None else environ
    with _watched_lock:
        watched = set(_watched)
    values = {
        value
        for name, value in env.items()
        if (name in watched or SECRET_ENV_NAME.search(name)) and len(value) >= MIN_SECRET_CHARS
    }
    return sorted(values, key=len, reverse=True)


class Redactor:
    """Masks a fixed set of secret values and every credential-shaped string."""

    def __init__(self, secrets: Iterable[str]) -> None:
        self._secrets = [s for s in secrets if len(s) >= MIN_SECRET_CHARS]
        self._secret_bytes = [s.encode() for s in self._secrets]

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> Redactor:
        return cls(secret_values(environ))

    def __call__(self, text: str) -> str:
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, MASK)
        lowered = text.lower()
        if not any(marker in lowered for marker in _SHAPE_MARKERS):
            return text
        return SECRET_SHAPES.sub(_mask_shape, text)

    def suspects(self, data: bytes) -> bool:
        """Whether `self` could change the UTF-8 text `data` (False: it certainly would
        not). The same test as `__call__` makes first, on bytes, so a batch's JSON need
        not be decoded to be checked."""
        if any(secret in data for secret in self._secret_bytes):
            return True
        if not data.isascii():
            # bytes.lower() folds ASCII only; str.lower() folds more (the Kelvin sign
            # to "k"), so outside ASCII only the text test is the same test.
            lowered_text = data.decode().lower()
            return any(marker in lowered_text for marker in _SHAPE_MARKERS)
        lowered = data.lower()
        return any(marker in lowered for marker in _SHAPE_MARKER_BYTES)

    def optional(self, text: str | None) -> str | None:
        return None if text is None else self(text)

    def value(self, value: Any) -> Any:
        """`value` with every string in it masked, through nested objects and lists (a
        dataset row as it is shown); numbers, booleans and None are returned as they are."""
        if isinstance(value, str):
            return self(value)
        if isinstance(value, Mapping):
            return {name: self.value(item) for name, item in value.items()}
        if isinstance(value, list | tuple):
            return [self.value(item) for item in value]
        return value


def _mask_shape(match: re.Match[str]) -> str:
    separator = match.group(1)
    if separator is None:  # a bearer token or sk- key: keep the scheme word, mask the rest
        word = match.group(0).split()[0]
        return MASK if word.lower().startswith("sk-") else f"{word} {MASK}"
    name = match.group(0)[: match.start(1) - match.start(0)]
    return f"{name}{separator}{MASK}"


def redact(text: str) -> str:
    """`text` with the current secrets and credential-shaped strings masked."""
    return Redactor.from_environ()(text)


class RedactingFormatter(logging.Formatter):
    """Formats a record as usual, then masks secrets in the whole text, traceback included.

    A formatter, not a filter: a filter would have to change the record itself, which
    every other handler (a test's log capture, say) shares.
    """

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))


def install_log_redaction(level: int = logging.WARNING) -> None:
    """Send promptlab's log records to stderr through a RedactingFormatter (CLI and app)."""
    logger = logging.getLogger("promptlab")
    if any(isinstance(h.formatter, RedactingFormatter) for h in logger.handlers):
        return
    handler = logging.StreamHandler()
    handler.setFormatter(RedactingFormatter("%(levelname)s %(name)s: %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(level)
