"""fakellm's error responses, with the real APIs' bodies and headers in each wire format."""

from __future__ import annotations

from aiohttp import web

from promptlab.fakellm import wire
from promptlab.fakellm.limits import Limiter


class ErrorResponses:
    """Error responses in one wire format, with the real APIs' bodies and headers."""

    def __init__(self, anthropic: bool, rid: str, limiter: Limiter) -> None:
        self.anthropic = anthropic
        self.rid = rid
        self.limiter = limiter

    def limit_headers(self) -> dict[str, str]:
        if self.anthropic:
            return {"request-id": self.rid, **self.limiter.anthropic_headers()}
        return {"x-request-id": self.rid, **self.limiter.openai_headers()}

    def _respond(
        self,
        status: int,
        message: str,
        err_type: str,
        code: str | None,
        extra: dict[str, str] | None = None,
        should_retry: bool | None = None,
        param: str | None = None,
    ) -> web.Response:
        headers = self.limit_headers()
        headers.update(extra or {})
        if should_retry is not None:
            headers["x-should-retry"] = "true" if should_retry else "false"
        if self.anthropic:
            body = wire.anthropic_error(status, message, self.rid)
        else:
            body = wire.openai_error(message, err_type, code, param)
        return web.Response(
            status=status, body=body, content_type="application/json", headers=headers
        )

    def auth(self) -> web.Response:
        message = "Incorrect API key provided." if not self.anthropic else "invalid x-api-key"
        return self._respond(401, message, "invalid_request_error", "invalid_api_key")

    def bad_request(
        self, message: str, param: str | None = None, code: str | None = None
    ) -> web.Response:
        return self._respond(400, message, "invalid_request_error", code, param=param)

    def echo_auth(self, key_header: str) -> web.Response:
        """A 400 whose message carries the caller's key header, as some proxies do."""
        return self._respond(
            400, f"invalid request from {key_header}", "invalid_request_error", None
        )

    def context_length(self, prompt: int, max_tokens: int, window: int) -> web.Response:
        if self.anthropic:
            message = (
                f"input length and `max_tokens` exceed context limit: {prompt} + {max_tokens} "
                f"> {window}, decrease input length or `max_tokens` and try again"
            )
        else:
            message = (
                f"This model's maximum context length is {window} tokens. However, you "
                f"requested {prompt + max_tokens} tokens ({prompt} in the messages, "
                f"{max_tokens} in the completion). Please reduce the length of the messages "
                "or completion."
            )
        return self._respond(400, message, "invalid_request_error", "context_length_exceeded")

    def quota(self) -> web.Response:
        if self.anthropic:
            # Anthropic's answer when credit runs out: 402 billing_error (PaymentRequiredError).
            return self._respond(
                402,
                "Your credit balance is too low to access the Anthropic API.",
                "billing_error",
                None,
                should_retry=False,
            )
        message = (
            "You exceeded your current quota, please check your plan and billing details. "
            "For more information on this error, read the docs: "
            "https://platform.openai.com/docs/guides/error-codes/api-errors."
        )
        return self._respond(
            429, message, "insufficient_quota", "insufficient_quota", should_retry=False
        )

    def rate_limited(self, model: str, which: str, wait_s: float, cost: int) -> web.Response:
        bucket = self.limiter.requests if which == "requests" else self.limiter.tokens
        limit = bucket.limit if bucket else 0
        if self.anthropic:
            unit = "requests" if which == "requests" else "input tokens"
            message = (
                f"This request would exceed the rate limit for your organization of {limit} "
                f"{unit} per minute. For details, refer to: "
                "https://docs.claude.com/en/api/rate-limits."
            )
        else:
            unit = "RPM" if which == "requests" else "TPM"
            requested = 1 if which == "requests" else cost
            message = (
                f"Rate limit reached for {model} in organization org-fakellm on {which} per "
                f"min ({unit}): Limit {limit}, Requested {requested}. Please try again in "
                f"{wire.openai_duration(wait_s)}. Visit "
                "https://platform.openai.com/account/rate-limits to learn more."
            )
        return self._respond(
            429,
            message,
            which,
            "rate_limit_exceeded",
            extra=wire.retry_headers(wait_s),
            should_retry=True,
        )

    def overloaded(self) -> web.Response:
        if self.anthropic:
            return self._respond(529, "Overloaded", "overloaded_error", None, should_retry=True)
        # OpenAI has no 529: its overload answer is a 503 with no retry-after.
        message = "Our servers are currently overloaded. Please try again later."
        return self._respond(
            503, message, "service_unavailable_error", "server_is_overloaded", should_retry=True
        )

    def server(self) -> web.Response:
        message = (
            "Internal server error"
            if self.anthropic
            else "The server had an error while processing your request. Sorry about that!"
        )
        return self._respond(500, message, "server_error", None, should_retry=True)


def key_header(request: web.Request, anthropic: bool) -> str:
    """The header carrying the caller's key: x-api-key, else Authorization (anthropic>=2
    sends `Authorization: Bearer` on the Anthropic route too)."""
    if anthropic and "x-api-key" in request.headers:
        return request.headers["x-api-key"]
    return request.headers.get("Authorization", "")
