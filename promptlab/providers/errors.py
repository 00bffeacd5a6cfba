"""SDK exceptions mapped, once, to promptlab's ErrorKind; plus the headers worth keeping.

Every exception class the `openai` and `anthropic` packages export has an explicit
entry below (tests/test_error_mapping.py fails when an SDK upgrade adds one). At run
time the lookup walks the class's MRO, so an unlisted subclass still maps like its
parent. A few kinds need the response body: OpenAI's `insufficient_quota` 429,
context-length 400s and content-policy 400s.
"""

from __future__ import annotations

import email.utils
import errno
import time
from collections.abc import Mapping
from typing import Any, Final

import aiohttp
import anthropic
import openai

from promptlab.errors import ErrorKind, ProviderError

#: Placeholder in the tables: decide from the HTTP status (generic status errors).
BY_STATUS: Final = "by_status"

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

OPENAI_ERROR_KINDS: dict[type[BaseException], ErrorKind | str] = {
    openai.OpenAIError: ErrorKind.BAD_REQUEST,  # raised client-side: retrying will not help
    openai.APIError: ErrorKind.SERVER,
    openai.APIStatusError: BY_STATUS,
    openai.APIConnectionError: ErrorKind.CONNECTION,
    openai.APITimeoutError: ErrorKind.TIMEOUT,
    openai.APIResponseValidationError: ErrorKind.SERVER,  # the server sent something odd
    openai.BadRequestError: ErrorKind.BAD_REQUEST,
    openai.AuthenticationError: ErrorKind.AUTH,
    openai.OAuthError: ErrorKind.AUTH,
    openai.PermissionDeniedError: ErrorKind.AUTH,
    openai.NotFoundError: ErrorKind.NOT_FOUND,
    openai.ConflictError: ErrorKind.SERVER,  # OpenAI documents 409 as a transient lock
    openai.UnprocessableEntityError: ErrorKind.BAD_REQUEST,
    openai.RateLimitError: ErrorKind.RATE_LIMIT,
    openai.InternalServerError: BY_STATUS,  # 500/503 server, 504 timeout, 529 overloaded
    openai.LengthFinishReasonError: ErrorKind.CONTEXT_LENGTH,
    openai.ContentFilterFinishReasonError: ErrorKind.CONTENT_FILTER,
    openai.InvalidWebhookSignatureError: ErrorKind.BAD_REQUEST,
    openai.WebSocketConnectionClosedError: ErrorKind.CONNECTION,
    openai.WebSocketQueueFullError: ErrorKind.OVERLOADED,  # client back-pressure: back off
}

ANTHROPIC_ERROR_KINDS: dict[type[BaseException], ErrorKind | str] = {
    anthropic.AnthropicError: ErrorKind.BAD_REQUEST,  # raised client-side
    anthropic.APIError: ErrorKind.SERVER,
    anthropic.APIStatusError: BY_STATUS,
    anthropic.APIConnectionError: ErrorKind.CONNECTION,
    anthropic.APITimeoutError: ErrorKind.TIMEOUT,
    anthropic.APIResponseValidationError: ErrorKind.SERVER,
    anthropic.APIWebhookValidationError: ErrorKind.BAD_REQUEST,
    anthropic.BadRequestError: ErrorKind.BAD_REQUEST,
    anthropic.AuthenticationError: ErrorKind.AUTH,
    anthropic.PaymentRequiredError: ErrorKind.QUOTA,
    anthropic.PermissionDeniedError: ErrorKind.AUTH,
    anthropic.NotFoundError: ErrorKind.NOT_FOUND,
    anthropic.RequestTimeoutError: ErrorKind.TIMEOUT,
    anthropic.ConflictError: ErrorKind.SERVER,
    anthropic.PreconditionFailedError: ErrorKind.BAD_REQUEST,
    anthropic.ContentTooLargeError: ErrorKind.BAD_REQUEST,  # body size, not the context
    anthropic.UnprocessableEntityError: ErrorKind.BAD_REQUEST,
    anthropic.RateLimitError: ErrorKind.RATE_LIMIT,
    anthropic.RequestHeaderFieldsTooLargeError: ErrorKind.BAD_REQUEST,
    anthropic.ClientClosedRequestError: ErrorKind.CONNECTION,
    anthropic.InternalServerError: BY_STATUS,
    anthropic.HTTPNotImplementedError: ErrorKind.BAD_REQUEST,  # retrying cannot fix a 501
    anthropic.ServiceUnavailableError: ErrorKind.SERVER,  # 503; see _STATUS_KINDS
    anthropic.GatewayTimeoutError: ErrorKind.TIMEOUT,
    anthropic.OverloadedError: ErrorKind.OVERLOADED,
    anthropic.RetryableError: ErrorKind.SERVER,
    anthropic.CredentialsError: ErrorKind.AUTH,
    anthropic.IdentityTokenFileError: ErrorKind.AUTH,
    anthropic.WorkloadIdentityError: ErrorKind.AUTH,
    # Typed 4xx/5xx errors keyed by `error.details.error_code`:
    anthropic.CMEKContextUnavailableError: ErrorKind.SERVER,
    anthropic.CMEKKeyUnreachableError: ErrorKind.SERVER,
    anthropic.CMEKKeyDisabledError: ErrorKind.AUTH,
    anthropic.CMEKKeyNetworkBlockedError: ErrorKind.AUTH,
    anthropic.ClaudeCodeKeyCreatorNotMemberError: ErrorKind.AUTH,
    anthropic.ClaudeCodeVersionTooOldError: ErrorKind.BAD_REQUEST,
    anthropic.OrganizationOnHoldError: ErrorKind.QUOTA,
    anthropic.OrganizationTypeNotSupportedError: ErrorKind.BAD_REQUEST,
    anthropic.ParentOrganizationRequiredError: ErrorKind.BAD_REQUEST,
    anthropic.RequestBodyEncodingInvalidError: ErrorKind.BAD_REQUEST,
    anthropic.RequestBodyEncodingUnsupportedError: ErrorKind.BAD_REQUEST,
    anthropic.RequestBodyTooLargeAfterDecodingError: ErrorKind.BAD_REQUEST,
    anthropic.WorkspaceHumanReviewDisabledError: ErrorKind.BAD_REQUEST,
    anthropic.SandboxEgressRestrictedError: ErrorKind.AUTH,
    anthropic.LinkedOrganizationBillingUnavailableError: ErrorKind.QUOTA,
    anthropic.LinkedOrganizationSpendLimitReachedError: ErrorKind.QUOTA,
    anthropic.ContractSpendLimitReachedError: ErrorKind.QUOTA,
    anthropic.EnforcedSpendLimitReachedError: ErrorKind.QUOTA,
    anthropic.RampLimitExceededError: ErrorKind.RATE_LIMIT,
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


def _lookup(table: Mapping[type[BaseException], ErrorKind | str], exc: BaseException) -> Any:
    for cls in type(exc).__mro__:
        if cls in table:
            return table[cls]
    return None


def _body_error(body: object) -> Mapping[str, Any]:
    """The error object inside a body, whichever SDK unwrapped it (or not)."""
    if isinstance(body, Mapping):
        inner = body.get("error")
        return inner if isinstance(inner, Mapping) else body
    return {}


def map_sdk_error(
    exc: BaseException,
    *,
    provider: str,
    table: Mapping[type[BaseException], ErrorKind | str],
) -> ProviderError:
    """The ProviderError for an SDK exception; the caller raises it `from exc`."""
    kind = _lookup(table, exc)
    response = getattr(exc, "response", None)
    status: int | None = getattr(exc, "status_code", None)
    raw_headers = getattr(response, "headers", None)
    headers = kept_headers(dict(raw_headers.items()) if raw_headers is not None else None)
    error = _body_error(getattr(exc, "body", None))
    code = str(error.get("code") or error.get("type") or "")
    message = str(error.get("message") or getattr(exc, "message", None) or exc)
    if kind == BY_STATUS or kind is None:
        kind = _kind_for_status(status)
    kind = _refine(kind, status, code, message)
    dropped = _dropped_connection(exc)
    if dropped is not None and kind in (ErrorKind.TIMEOUT, ErrorKind.CONNECTION):
        # The SDKs' own text ("Request timed out." / "Connection error.") hides what happened.
        kind = ErrorKind.CONNECTION
        message = _connection_message(dropped)
    return ProviderError(
        kind,
        message,
        status=status,
        provider=provider,
        retry_after_s=retry_after_seconds(headers),
        should_retry=should_retry(headers),
        headers=headers,
    )


def _dropped_connection(exc: BaseException) -> aiohttp.ClientConnectionError | None:
    """The aiohttp error under `exc` when a connection failed or dropped (not a timeout).

    The SDKs' aiohttp transport reports every aiohttp connection error as a connect
    timeout or a bare "Connection error."; the original aiohttp exception is still on
    the cause chain.
    """
    cause = exc.__cause__ or exc.__context__
    while cause is not None:
        if isinstance(cause, aiohttp.ClientConnectionError) and not isinstance(
            cause, aiohttp.ServerTimeoutError | aiohttp.SocketTimeoutError
        ):
            return cause
        cause = cause.__cause__ or cause.__context__
    return None


def _connection_message(cause: aiohttp.ClientConnectionError) -> str:
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


def _kind_for_status(status: int | None) -> ErrorKind:
    if status is None:
        return ErrorKind.SERVER
    if status in _STATUS_KINDS:
        return _STATUS_KINDS[status]
    return ErrorKind.SERVER if status >= 500 else ErrorKind.BAD_REQUEST


def _refine(kind: ErrorKind, status: int | None, code: str, message: str) -> ErrorKind:
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


def map_openai_error(exc: BaseException, provider: str) -> ProviderError:
    """Map an `openai` SDK exception."""
    return map_sdk_error(exc, provider=provider, table=OPENAI_ERROR_KINDS)


def map_anthropic_error(exc: BaseException, provider: str) -> ProviderError:
    """Map an `anthropic` SDK exception."""
    return map_sdk_error(exc, provider=provider, table=ANTHROPIC_ERROR_KINDS)


def unmapped_exceptions(
    module: object, table: Mapping[type[BaseException], ErrorKind | str]
) -> list[str]:
    """Public exception classes `module` exports that have no entry of their own in `table`."""
    missing = []
    for name in dir(module):
        value = getattr(module, name)
        if (
            not name.startswith("_")
            and isinstance(value, type)
            and issubclass(value, BaseException)
            and value not in table
        ):
            missing.append(name)
    return sorted(missing)
