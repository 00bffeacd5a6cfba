"""Every exception the SDKs export is mapped; status and body refine the kind."""

from __future__ import annotations

import errno
import json
from typing import Any

import aiohttp
import anthropic
import httpx2
import openai
import pytest
from anthropic._error_classes import ERROR_CLASSES, make_status_error  # the SDK's own dispatch

from promptlab.errors import ErrorKind
from promptlab.providers.errors import (
    ANTHROPIC_ERROR_KINDS,
    OPENAI_ERROR_KINDS,
    kept_headers,
    map_anthropic_error,
    map_openai_error,
    retry_after_seconds,
    should_retry,
    unmapped_exceptions,
)
from promptlab.providers.http import status_error

SDKS = [(openai, OPENAI_ERROR_KINDS), (anthropic, ANTHROPIC_ERROR_KINDS)]


@pytest.mark.parametrize(("module", "table"), SDKS, ids=["openai", "anthropic"])
def test_every_exported_exception_class_is_mapped(module: Any, table: Any) -> None:
    assert unmapped_exceptions(module, table) == []


@pytest.mark.parametrize(("module", "table"), SDKS, ids=["openai", "anthropic"])
def test_the_check_fails_when_a_class_is_left_unmapped(module: Any, table: Any) -> None:
    partial = {cls: kind for cls, kind in table.items() if cls is not module.RateLimitError}
    assert unmapped_exceptions(module, partial) == ["RateLimitError"]


def _response(status: int, headers: dict[str, str] | None = None) -> httpx2.Response:
    request = httpx2.Request("POST", "http://127.0.0.1/v1/x")
    return httpx2.Response(status, headers=headers or {}, request=request)


OPENAI_CASES = [
    # (exception class, status, error body, expected kind)
    (openai.RateLimitError, 429, {"code": "rate_limit_exceeded"}, ErrorKind.RATE_LIMIT),
    (openai.RateLimitError, 429, {"code": "insufficient_quota"}, ErrorKind.QUOTA),
    (openai.BadRequestError, 400, {"code": "context_length_exceeded"}, ErrorKind.CONTEXT_LENGTH),
    (openai.BadRequestError, 400, {"code": "content_policy_violation"}, ErrorKind.CONTENT_FILTER),
    (openai.BadRequestError, 400, {"code": None}, ErrorKind.BAD_REQUEST),
    (openai.AuthenticationError, 401, {}, ErrorKind.AUTH),
    (openai.PermissionDeniedError, 403, {}, ErrorKind.AUTH),
    (openai.NotFoundError, 404, {}, ErrorKind.NOT_FOUND),
    (openai.InternalServerError, 500, {}, ErrorKind.SERVER),
    (openai.InternalServerError, 503, {"code": "server_is_overloaded"}, ErrorKind.SERVER),
    (openai.InternalServerError, 529, {}, ErrorKind.OVERLOADED),
    (openai.APIStatusError, 408, {}, ErrorKind.TIMEOUT),
    (openai.APIStatusError, 418, {}, ErrorKind.BAD_REQUEST),
]


@pytest.mark.parametrize(("cls", "status", "body", "kind"), OPENAI_CASES)
def test_openai_status_errors(cls: Any, status: int, body: dict[str, Any], kind: ErrorKind) -> None:
    exc = cls("boom", response=_response(status, {"retry-after-ms": "250"}), body=body)
    error = map_openai_error(exc, "openai")
    assert (error.kind, error.status, error.retry_after_s) == (kind, status, 0.25)


ANTHROPIC_CASES = [
    (anthropic.RateLimitError, 429, "rate_limit_error", "slow down", ErrorKind.RATE_LIMIT),
    (anthropic.OverloadedError, 529, "overloaded_error", "Overloaded", ErrorKind.OVERLOADED),
    (
        anthropic.BadRequestError,
        400,
        "invalid_request_error",
        "prompt is too long: 9 > 8",
        ErrorKind.CONTEXT_LENGTH,
    ),
    (anthropic.BadRequestError, 400, "invalid_request_error", "bad", ErrorKind.BAD_REQUEST),
    (anthropic.PaymentRequiredError, 402, "billing_error", "no credit", ErrorKind.QUOTA),
    (anthropic.GatewayTimeoutError, 504, "api_error", "slow", ErrorKind.TIMEOUT),
    (anthropic.APIStatusError, 418, "api_error", "teapot", ErrorKind.BAD_REQUEST),
]


@pytest.mark.parametrize(("cls", "status", "err_type", "message", "kind"), ANTHROPIC_CASES)
def test_anthropic_status_errors(
    cls: Any, status: int, err_type: str, message: str, kind: ErrorKind
) -> None:
    body = {"type": "error", "error": {"type": err_type, "message": message}}
    headers = {"retry-after": "3", "x-should-retry": "false"}
    exc = cls(message, response=_response(status, headers), body=body)
    error = map_anthropic_error(exc, "anthropic")
    assert (error.kind, error.status, error.provider_message) == (kind, status, message)
    assert (error.retry_after_s, error.should_retry) == (3.0, False)


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (openai.APITimeoutError(httpx2.Request("POST", "http://x")), ErrorKind.TIMEOUT),
        (
            openai.APIConnectionError(request=httpx2.Request("POST", "http://x")),
            ErrorKind.CONNECTION,
        ),
        (anthropic.APITimeoutError(httpx2.Request("POST", "http://x")), ErrorKind.TIMEOUT),
        (anthropic.CredentialsError("no creds"), ErrorKind.AUTH),
    ],
)
def test_transport_and_client_errors(exc: Exception, kind: ErrorKind) -> None:
    mapper = map_openai_error if isinstance(exc, openai.OpenAIError) else map_anthropic_error
    error = mapper(exc, "p")
    assert error.kind is kind
    assert error.status is None


def test_an_unlisted_subclass_maps_like_its_parent() -> None:
    class FutureRateLimit(anthropic.RateLimitError):
        pass

    exc = FutureRateLimit("x", response=_response(429), body=None)
    assert map_anthropic_error(exc, "a").kind is ErrorKind.RATE_LIMIT


@pytest.mark.parametrize(
    ("headers", "seconds"),
    [
        ({"retry-after-ms": "1500", "retry-after": "9"}, 1.5),
        ({"retry-after": "2"}, 2.0),
        ({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, 0.0),
        ({"retry-after": "soon"}, None),
        ({}, None),
    ],
)
def test_retry_after(headers: dict[str, str], seconds: float | None) -> None:
    assert retry_after_seconds(headers) == seconds


def test_kept_headers_are_rate_limit_and_retry_only() -> None:
    kept = kept_headers(
        {
            "X-RateLimit-Remaining-Requests": "5",
            "anthropic-ratelimit-tokens-limit": "9",
            "Retry-After": "1",
            "content-type": "application/json",
            "x-should-retry": "true",
        }
    )
    assert kept == {
        "x-ratelimit-remaining-requests": "5",
        "anthropic-ratelimit-tokens-limit": "9",
        "retry-after": "1",
        "x-should-retry": "true",
    }
    assert should_retry(kept) is True


def _raised_from(exc: BaseException, cause: BaseException) -> BaseException:
    """`exc` as the SDK raises it: `raise exc from cause`."""
    try:
        raise exc from cause
    except BaseException as raised:  # noqa: BLE001 - handed back
        return raised


CONNECTION_CASES = [
    # (aiohttp root cause, kind, message)
    (
        aiohttp.ServerDisconnectedError(),
        ErrorKind.CONNECTION,
        "connection reset by server: Server disconnected",
    ),
    (
        aiohttp.ClientOSError(errno.ECONNRESET, "Connection reset by peer"),
        ErrorKind.CONNECTION,
        "connection reset by server: [Errno 104] Connection reset by peer",
    ),
    (
        aiohttp.ClientConnectorError(
            aiohttp.client_reqrep.ConnectionKey("h", 1, False, True, None, None, None),
            ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused"),
        ),
        ErrorKind.CONNECTION,
        "could not connect: Cannot connect to host h:1",
    ),
    (
        aiohttp.ServerTimeoutError("Timeout on reading data from socket"),
        ErrorKind.TIMEOUT,
        "Request timed out",
    ),
]


@pytest.mark.parametrize(("cause", "kind", "message"), CONNECTION_CASES)
@pytest.mark.parametrize("sdk", ["openai", "anthropic"])
def test_connection_errors_say_what_happened(
    sdk: str, cause: BaseException, kind: ErrorKind, message: str
) -> None:
    request = httpx2.Request("POST", "http://x")
    if sdk == "openai":
        error = map_openai_error(_raised_from(openai.APITimeoutError(request), cause), "p")
    else:
        # The Anthropic SDK wraps the same failures as APIConnectionError.
        exc = (
            anthropic.APITimeoutError(request)
            if kind is ErrorKind.TIMEOUT
            else (anthropic.APIConnectionError(request=request))
        )
        error = map_anthropic_error(_raised_from(exc, cause), "p")
    assert error.kind is kind
    assert error.provider_message.startswith(message)


def _same(a: Any, b: Any) -> tuple[Any, ...]:
    return (a.kind, a.status, a.retry_after_s, a.should_retry, a.headers) == (
        b.kind,
        b.status,
        b.retry_after_s,
        b.should_retry,
        b.headers,
    ), (a.kind, b.kind)


# Every (status, error code) the anthropic SDK picks an exception class for.
ANTHROPIC_ANSWERS = sorted(ERROR_CLASSES, key=lambda k: (k[0], k[1] or ""))
LEAN_HEADERS = {"retry-after": "2", "x-should-retry": "true", "content-type": "text/html"}


@pytest.mark.parametrize(("status", "code"), ANTHROPIC_ANSWERS)
def test_the_lean_path_maps_every_anthropic_answer_as_the_sdk_does(
    status: int, code: str | None
) -> None:
    details = {"details": {"error_code": code}} if code else {}
    body = {"type": "error", "error": {"type": "x_error", "message": "m", **details}}
    raw = json.dumps(body).encode()
    exc = make_status_error("m", body=body, response=_response(status, LEAN_HEADERS))
    sdk = map_anthropic_error(exc, "a")
    lean = status_error(status, LEAN_HEADERS, raw, provider="a", anthropic=True)
    same, kinds = _same(sdk, lean)
    assert same, kinds


OPENAI_BODIES = [
    {},
    {"code": "insufficient_quota"},
    {"code": "context_length_exceeded"},
    {"code": "content_policy_violation"},
    {"type": "server_error"},
]


@pytest.mark.parametrize("body", OPENAI_BODIES)
@pytest.mark.parametrize("status", [*range(400, 432), 499, *range(500, 505), 529])
def test_the_lean_path_maps_every_openai_answer_as_the_sdk_does(
    status: int, body: dict[str, Any]
) -> None:
    wire_body = {"error": {"message": "m", **body}}
    client = openai.OpenAI(api_key="k", base_url="http://127.0.0.1:9/v1")
    exc = client._make_status_error("m", body=wire_body, response=_response(status, LEAN_HEADERS))
    sdk = map_openai_error(exc, "o")
    lean = status_error(status, LEAN_HEADERS, json.dumps(wire_body).encode(), provider="o")
    same, kinds = _same(sdk, lean)
    assert same, kinds


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"<html>502 Bad Gateway</html>", "<html>502 Bad Gateway</html>"),
        (b"", "Error code: 502"),
        (b'{"error": {"message": "upstream down"}}', "upstream down"),
    ],
)
def test_a_non_json_error_body_is_kept_as_text(raw: bytes, message: str) -> None:
    error = status_error(502, {}, raw, provider="p")
    assert (error.kind, error.status, error.provider_message) == (ErrorKind.SERVER, 502, message)
