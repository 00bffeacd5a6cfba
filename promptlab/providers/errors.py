"""SDK exceptions mapped, once, to promptlab's ErrorKind.

Every exception class the `openai` and `anthropic` packages export has an explicit
entry below (tests/test_error_mapping.py fails when an SDK upgrade adds one). At run
time the lookup walks the class's MRO, so an unlisted subclass still maps like its
parent. The status, headers and body an SDK error carries then go through
`http_errors.error_from_response`, the one mapping the lean HTTP path uses too: it
refines the kind from the body (OpenAI's `insufficient_quota` 429, context-length and
content-policy 400s) and reads the retry hints.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import aiohttp
import anthropic
import openai

from promptlab.errors import ErrorKind, ProviderError
from promptlab.providers.http_errors import (
    connection_message,
    error_from_response,
    kept_headers,
    retry_after_seconds,
    should_retry,
)

#: Placeholder in the tables: decide from the HTTP status (generic status errors).
BY_STATUS: Final = "by_status"

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


def _lookup(table: Mapping[type[BaseException], ErrorKind | str], exc: BaseException) -> Any:
    for cls in type(exc).__mro__:
        if cls in table:
            return table[cls]
    return None


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
    error = error_from_response(
        status,
        dict(raw_headers.items()) if raw_headers is not None else None,
        getattr(exc, "body", None),
        provider=provider,
        kind=None if kind == BY_STATUS else kind,
        fallback_message=str(getattr(exc, "message", None) or exc),
    )
    dropped = _dropped_connection(exc)
    if dropped is not None and error.kind in (ErrorKind.TIMEOUT, ErrorKind.CONNECTION):
        # The SDKs' own text ("Request timed out." / "Connection error.") hides what happened.
        error = ProviderError(
            ErrorKind.CONNECTION,
            connection_message(dropped),
            status=status,
            provider=provider,
            retry_after_s=error.retry_after_s,
            should_retry=error.should_retry,
            headers=error.headers,
        )
    return error


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


__all__ = [
    "ANTHROPIC_ERROR_KINDS",
    "BY_STATUS",
    "OPENAI_ERROR_KINDS",
    "kept_headers",
    "map_anthropic_error",
    "map_openai_error",
    "map_sdk_error",
    "retry_after_seconds",
    "should_retry",
    "unmapped_exceptions",
]
