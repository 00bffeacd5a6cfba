"""HTTP answers and transport failures mapped to ProviderError, imported by no SDK.

One mapping from (status, headers, body) to a ProviderError serves both transports:
the SDK adapters (providers/errors.py, after their exception tables) and the lean
HTTP path (providers/http.py). Kinds come from the status, refined by the body: quota
429s, context-length and content-policy 400s, and Anthropic's typed errors keyed by
`error.details.error_code`.
"""

from __future__ import annotations

import email.utils
import errno
import time
from collections.abc import Mapping
from typing import Any

import aiohttp

from promptlab.errors import ErrorKind, ProviderError

_STATUS_KINDS: dict[int, ErrorKind] = {
    400: ErrorKind.BAD_REQUEST,
    401: ErrorKind.AUTH,
    402: ErrorKind.QUOTA,
    403: ErrorKind.AUTH,
    404: ErrorKind.NOT_FOUND,
    408: ErrorKind.TIMEOUT,
    409: ErrorKind.SERVER,
    413: ErrorKind.BAD_REQUEST,
    422: ErrorKind.BAD_REQUEST,
    429: ErrorKind.RATE_LIMIT,
    499: ErrorKind.CONNECTION,
    # A 503 is a transient server error, retried by each item with its own backoff.
    # Only 529 (Anthropic's overload answer) is `overloaded`, which the engine treats
    # like a 429 (shared gate, rate and concurrency cut): random 503s treated that way
    # cut an endpoint to one request at a time (200 items: 50 s instead of 2 s).
    503: ErrorKind.SERVER,
    504: ErrorKind.TIMEOUT,
    529: ErrorKind.OVERLOADED,
}

#: Anthropic answers whose kind is not the status's, keyed by (status, error code) as
#: the anthropic SDK picks its exception class; errors.py maps those classes the same
#: way, and tests/test_error_mapping.py checks the two agree for every SDK class.
ANTHROPIC_KINDS: dict[tuple[int, str | None], ErrorKind] = {
    (501, None): ErrorKind.BAD_REQUEST,  # retrying cannot fix a 501
    (400, "claude_code_key_creator_not_member"): ErrorKind.AUTH,
    (400, "cmek_key_disabled"): ErrorKind.AUTH,
    (400, "cmek_key_network_blocked"): ErrorKind.AUTH,
    (400, "organization_on_hold"): ErrorKind.QUOTA,
    (429, "contract_spend_limit_reached"): ErrorKind.QUOTA,
    (429, "enforced_spend_limit_reached"): ErrorKind.QUOTA,
}

#: Response headers kept on every response and error: rate-limit state and retry hints.
_KEPT_PREFIXES = ("x-ratelimit-", "anthropic-ratelimit-")
_KEPT_HEADERS = frozenset(
    {"retry-after", "retry-after-ms", "x-should-retry", "x-request-id", "request-id"}
)
#: Socket errors that mean the peer dropped an open connection.
_RESET_ERRNOS = frozenset({errno.ECONNRESET, errno.EPIPE, errno.ECONNABORTED})
#: Body codes that turn a 400 into a more precise kind.
_CONTEXT_CODES = frozenset({"context_length_exceeded", "string_above_max_length"})
_CONTENT_FILTER_CODES = frozenset({"content_filter", "content_policy_violation"})
#: Anthropic reports an over-long prompt only in its message text.
_ANTHROPIC_CONTEXT_PHRASES = ("prompt is too long", "context limit", "context window")


def kept_headers(headers: Mapping[str, str] | None) -> dict[str, str]:
    """The rate-limit and retry headers of a response, names lower-cased."""
    if not headers:
        return {}
    kept: dict[str, str] = {}
    for name, value in headers.items():
        low = name.lower()
        if low in _KEPT_HEADERS or low.startswith(_KEPT_PREFIXES):
            kept[low] = value
    return kept


def retry_after_seconds(headers: Mapping[str, str]) -> float | None:
    """The server's retry hint: `retry-after-ms`, else `retry-after` (seconds or a date)."""
    millis = headers.get("retry-after-ms")
    if millis is not None:
        try:
            return max(0.0, float(millis) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        parsed = email.utils.parsedate_tz(value)
        if parsed is None:
            return None
        return max(0.0, email.utils.mktime_tz(parsed) - time.time())


def should_retry(headers: Mapping[str, str]) -> bool | None:
    """The `x-should-retry` header as a bool, None when absent or unreadable."""
    value = headers.get("x-should-retry", "").strip().lower()
    return {"true": True, "false": False}.get(value)


def body_error(body: object) -> Mapping[str, Any]:
    """The error object inside a body, whichever SDK unwrapped it (or not)."""
    if isinstance(body, Mapping):
        inner = body.get("error")
        return inner if isinstance(inner, Mapping) else body
    return {}


def anthropic_kind(status: int, body: object) -> ErrorKind | None:
    """The kind of an Anthropic answer whose (status, error code) overrides the status."""
    details = body_error(body).get("details")
    code = details.get("error_code") if isinstance(details, Mapping) else None
    code = code if isinstance(code, str) else None
    return ANTHROPIC_KINDS.get((status, code)) or ANTHROPIC_KINDS.get((status, None))


def kind_for_status(status: int | None) -> ErrorKind:
    """The kind an HTTP status means before the body is read."""
    if status is None:
        return ErrorKind.SERVER
    if status in _STATUS_KINDS:
        return _STATUS_KINDS[status]
    return ErrorKind.SERVER if status >= 500 else ErrorKind.BAD_REQUEST


def refine(kind: ErrorKind, status: int | None, code: str, message: str) -> ErrorKind:
    """Kinds only the body can tell: quota 429s, context-length and content-filter 400s."""
    if status == 429 and code == "insufficient_quota":
        return ErrorKind.QUOTA
    if kind is ErrorKind.BAD_REQUEST:
        lowered = message.lower()
        if code in _CONTEXT_CODES or any(p in lowered for p in _ANTHROPIC_CONTEXT_PHRASES):
            return ErrorKind.CONTEXT_LENGTH
        if code in _CONTENT_FILTER_CODES:
            return ErrorKind.CONTENT_FILTER
    return kind


def error_from_response(
    status: int | None,
    headers: Mapping[str, str] | None,
    body: object,
    *,
    provider: str,
    kind: ErrorKind | None = None,
    fallback_message: str = "",
) -> ProviderError:
    """The ProviderError for an HTTP answer (or an SDK error carrying one).

    `kind` is what the caller already knows (an SDK exception class); None decides
    from the status. The body's `error.code` / `error.type` and `error.message` refine
    the kind; the kept headers give the retry hints.
    """
    kept = kept_headers(headers)
    error = body_error(body)
    code = str(error.get("code") or error.get("type") or "")
    message = str(error.get("message") or fallback_message or f"HTTP {status}")
    kind = refine(kind or kind_for_status(status), status, code, message)
    return ProviderError(
        kind,
        message,
        status=status,
        provider=provider,
        retry_after_s=retry_after_seconds(kept),
        should_retry=should_retry(kept),
        headers=kept,
    )


def malformed_body_error(
    exc: Exception, status: int, headers: Mapping[str, str] | None, *, provider: str
) -> ProviderError:
    """A 2xx answer whose body is not the JSON the API documents: the server's fault."""
    kept = kept_headers(headers)
    return ProviderError(
        ErrorKind.SERVER,
        f"malformed response body (HTTP {status}): {exc}",
        status=status,
        provider=provider,
        retry_after_s=retry_after_seconds(kept),
        should_retry=should_retry(kept),
        headers=kept,
    )


def connection_message(cause: aiohttp.ClientConnectionError) -> str:
    """What happened to the connection, in words, with aiohttp's own text."""
    text = str(cause) or type(cause).__name__
    if isinstance(cause, aiohttp.ClientConnectorError):
        return f"could not connect: {text}"
    dropped = isinstance(cause, aiohttp.ServerDisconnectedError) or (
        isinstance(cause, aiohttp.ClientOSError) and cause.errno in _RESET_ERRNOS
    )
    if dropped:
        return f"connection reset by server: {text}"
    return f"connection failed: {text}"


def transport_error(
    exc: TimeoutError | aiohttp.ClientError, provider: str, url: str, timeout_s: float
) -> ProviderError:
    """The ProviderError for a request that got no HTTP answer (or lost it mid-way): a
    timeout, a bad URL, a refused or dropped connection, a body cut off."""
    if isinstance(exc, TimeoutError):
        message = f"Request timed out: no answer within {timeout_s:g} s"
        return ProviderError(ErrorKind.TIMEOUT, message, provider=provider)
    if isinstance(exc, aiohttp.InvalidURL):
        message = f"invalid URL {url!r}: {exc}"
        return ProviderError(ErrorKind.BAD_REQUEST, message, provider=provider)
    if isinstance(exc, aiohttp.ClientConnectionError):
        return ProviderError(ErrorKind.CONNECTION, connection_message(exc), provider=provider)
    message = f"connection failed: {exc or type(exc).__name__}"
    return ProviderError(ErrorKind.CONNECTION, message, provider=provider)
