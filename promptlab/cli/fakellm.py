"""`promptlab fakellm`: serve the simulated model over HTTP (see promptlab.fakellm.server)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from promptlab.cli.common import handle_errors
from promptlab.errors import ConfigError

if TYPE_CHECKING:
    from promptlab.fakellm.server import FakeLLMConfig

#: Loopback only: fakellm is a test and demo double, never a public server.
LOOPBACK = "127.0.0.1"


@click.command("fakellm")
@click.option("--port", type=int, default=8011, show_default=True, help="Port on 127.0.0.1.")
@click.option("--rpm", type=click.IntRange(min=1), help="Requests per minute (429 beyond).")
@click.option("--tpm", type=click.IntRange(min=1), help="Tokens per minute: prompt + max_tokens.")
@click.option(
    "--burst-s",
    type=click.FloatRange(min=0.001),
    default=10.0,
    show_default=True,
    help="Seconds' worth of the per-minute limits a bucket holds.",
)
@click.option(
    "--shared-load",
    type=click.FloatRange(0, 1, max_open=True),
    default=0.0,
    help="Share of the limits another client on the same key takes: the caller gets less "
    "than the limit headers say, sees remaining 0 and 429s (as on a shared organization key).",
)
@click.option(
    "--latency-ms", type=click.FloatRange(min=0), default=0.0, help="Fixed delay per response."
)
@click.option(
    "--sim-latency",
    is_flag=True,
    help="Wait the simulated latency (lognormal + per token) instead of --latency-ms.",
)
@click.option("--fail-rate", type=click.FloatRange(0, 1), default=0.0, help="Share of 500s.")
@click.option(
    "--timeout-rate",
    type=click.FloatRange(0, 1),
    default=0.0,
    help="Share of requests held past the client's timeout.",
)
@click.option(
    "--timeout-hold-s",
    type=click.FloatRange(min=0),
    default=120.0,
    show_default=True,
    help="How long a timeout fault holds the request.",
)
@click.option(
    "--malformed-rate",
    type=click.FloatRange(0, 1),
    help="Share of malformed JSON answers to schema requests (default: per sim model).",
)
@click.option(
    "--quota-rate",
    type=click.FloatRange(0, 1),
    default=0.0,
    help="Share of 429 insufficient_quota (Anthropic format: 402 billing_error).",
)
@click.option("--insufficient-quota", is_flag=True, help="Every request fails: quota exhausted.")
@click.option(
    "--overloaded-rate",
    type=click.FloatRange(0, 1),
    default=0.0,
    help="Share of overloaded answers (Anthropic 529, OpenAI 503).",
)
@click.option(
    "--reset-rate", type=click.FloatRange(0, 1), default=0.0, help="Share of connection resets."
)
@click.option(
    "--echo-auth-rate",
    type=click.FloatRange(0, 1),
    default=0.0,
    help="Share of 400s whose message repeats the caller's key header (Authorization, or "
    "x-api-key) verbatim: for testing that keys are scrubbed from stored errors.",
)
@click.option(
    "--context-window", type=click.IntRange(min=1), help="Reject prompt + max_tokens above it."
)
@click.option("--require-key", help="Answer 401 unless requests carry this API key.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of text and faults.")
@click.option(
    "--batch-delay-s",
    type=click.FloatRange(min=0),
    default=0.0,
    help="Seconds from a batch's creation until it is done (0: done at its first read).",
)
@click.option(
    "--batch-expire-s",
    type=click.FloatRange(min=0, min_open=True),
    help="Seconds after which an unfinished batch expires (default: the 24 h window).",
)
@click.option(
    "--batch-line-fail-rate",
    type=click.FloatRange(0, 1),
    default=0.0,
    help="Share of batch lines answered with an error (chosen by --seed).",
)
@click.option(
    "--batch-max-requests",
    type=click.IntRange(min=1),
    help="Requests a batch may hold (default: OpenAI 50,000, Anthropic 100,000).",
)
@click.option(
    "--batch-max-bytes",
    type=click.IntRange(min=1),
    help="Bytes a batch may hold (default: OpenAI 200 MB, Anthropic 256 MB).",
)
@handle_errors
def fakellm_command(
    port: int,
    rpm: int | None,
    tpm: int | None,
    burst_s: float,
    shared_load: float,
    latency_ms: float,
    sim_latency: bool,
    fail_rate: float,
    timeout_rate: float,
    timeout_hold_s: float,
    malformed_rate: float | None,
    quota_rate: float,
    insufficient_quota: bool,
    overloaded_rate: float,
    reset_rate: float,
    echo_auth_rate: float,
    context_window: int | None,
    require_key: str | None,
    seed: int,
    batch_delay_s: float,
    batch_expire_s: float | None,
    batch_line_fail_rate: float,
    batch_max_requests: int | None,
    batch_max_bytes: int | None,
) -> None:
    """Serve the simulated model in OpenAI and Anthropic format on 127.0.0.1 (for tests)."""
    from promptlab.fakellm.server import FakeLLMConfig

    try:
        config = FakeLLMConfig(
            host=LOOPBACK,
            port=port,
            rpm=rpm,
            tpm=tpm,
            burst_s=burst_s,
            shared_load=shared_load,
            latency_ms=latency_ms,
            sim_latency=sim_latency,
            fail_rate=fail_rate,
            timeout_rate=timeout_rate,
            timeout_hold_s=timeout_hold_s,
            malformed_rate=malformed_rate,
            quota_rate=1.0 if insufficient_quota else quota_rate,
            overloaded_rate=overloaded_rate,
            reset_rate=reset_rate,
            echo_auth_rate=echo_auth_rate,
            seed=seed,
            api_key=require_key,
            context_window=context_window,
            batch_delay_s=batch_delay_s,
            batch_expire_s=batch_expire_s,
            batch_line_fail_rate=batch_line_fail_rate,
            batch_max_requests=batch_max_requests,
            batch_max_bytes=batch_max_bytes,
        )
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    _serve(config)


def _serve(config: FakeLLMConfig) -> None:
    """Serve until interrupted; a port another server holds is one line."""
    from promptlab.fakellm.server import run

    try:
        run(config, announce=lambda line: click.echo(line, err=True))
    except OSError as exc:
        raise ConfigError(
            f"cannot listen on {LOOPBACK}:{config.port}: {exc.strerror or exc} (another "
            "server has it? choose another with --port)"
        ) from None


commands: list[click.Command] = [fakellm_command]
