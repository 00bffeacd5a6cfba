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
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from promptlab.audit.logjson import JsonFormatter
from promptlab.audit.masking import Masker
from promptlab.config import parse_log_format, parse_mask_names
from promptlab.errors import ConfigError

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


#: A text log line (PROMPTLAB_LOG_FORMAT=text, the default).
TEXT_LOG_FORMAT = "%(levelname)s %(name)s: %(message)s"


class LogScrubber:
    """What the text of every log line passes through, whatever its format: secrets
    redacted, then the PROMPTLAB_MASK patterns masked (an email an error echoes, say)."""

    def __init__(self, mask: Sequence[str] = ()) -> None:
        self._masker = Masker(mask) if mask else None

    def __call__(self, text: str) -> str:
        text = redact(text)
        return self._masker.mask(text, {}) if self._masker is not None else text


class RedactingFormatter(logging.Formatter):
    """Formats a record as usual, then masks secrets in the whole text, traceback included.

    A formatter, not a filter: a filter would have to change the record itself, which
    every other handler (a test's log capture, say) shares.
    """

    def __init__(self, fmt: str | None = None, *, mask: Sequence[str] = ()) -> None:
        super().__init__(fmt)
        self._scrub = LogScrubber(mask)

    def format(self, record: logging.LogRecord) -> str:
        return self._scrub(super().format(record))


def log_formatter(environ: Mapping[str, str] | None = None) -> logging.Formatter:
    """The formatter PROMPTLAB_LOG_FORMAT asks for (text or json), masking what
    PROMPTLAB_MASK names; ConfigError for any other format."""
    env = os.environ if environ is None else environ
    chosen = parse_log_format(env.get("PROMPTLAB_LOG_FORMAT"))
    try:
        mask = parse_mask_names(env.get("PROMPTLAB_MASK"))
    except ConfigError:
        mask = ()  # the command refuses it in one line of its own when it reads the settings
    if chosen == "json":
        return JsonFormatter(LogScrubber(mask))
    return RedactingFormatter(TEXT_LOG_FORMAT, mask=mask)


def install_log_redaction(
    level: int = logging.WARNING, environ: Mapping[str, str] | None = None
) -> None:
    """Send promptlab's log records to stderr, secrets redacted, in the format the
    environment asks for (CLI and app). Called again, it keeps its one handler and gives
    it the format the environment asks for then."""
    formatter = log_formatter(environ)
    logger = logging.getLogger("promptlab")
    for handler in logger.handlers:
        if isinstance(handler.formatter, RedactingFormatter | JsonFormatter):
            handler.setFormatter(formatter)
            return
    handler = logging.StreamHandler()
    handler.setFormatter(formatter)
    logger.addHandler(handler)
    logger.setLevel(level)
