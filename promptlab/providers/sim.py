"""The in-process simulated provider: no key, no network, same response shape."""

from __future__ import annotations

import asyncio
import random

from promptlab.errors import ErrorKind, ProviderError
from promptlab.providers.base import CompletionRequest, CompletionResponse
from promptlab.providers.config import EndpointConfig
from promptlab.providers.simulator import (
    SIMULATED_LABEL,
    FaultRates,
    chosen_logprob,
    simulate,
    simulated_logprobs,
)
from promptlab.providers.wire import mean_entropy

#: Marks every simulated response, so nothing downstream mistakes it for a real one.
SIMULATED_HEADER = "x-promptlab-simulated"


class SimProvider:
    """Answers with the simulator (providers/simulator.py), after waiting its latency."""

    kind = "sim"
    supports_json_schema = True

    def __init__(
        self,
        endpoint: EndpointConfig,
        *,
        latency_scale: float | None = None,
        seed: int = 0,
        rates: FaultRates | None = None,
        server_error_rate: float = 0.0,
        pace: float = 1.0,
    ) -> None:
        self.name = endpoint.name
        self.endpoint = endpoint
        self.latency_scale = endpoint.latency_scale if latency_scale is None else latency_scale
        self.seed = seed
        self.rates = rates
        self.server_error_rate = server_error_rate
        self.pace = pace
        # Transport faults are drawn per attempt (not per request), so a retry can succeed.
        self._fault_rng = random.Random(seed)

    def __repr__(self) -> str:
        return f"SimProvider(name={self.name!r}, latency_scale={self.latency_scale})"

    async def complete(self, request: CompletionRequest) -> CompletionResponse:
        """Simulate one completion and wait its (scaled) latency."""
        if self.server_error_rate and self._fault_rng.random() < self.server_error_rate:
            raise ProviderError(
                ErrorKind.SERVER,
                f"{SIMULATED_LABEL} server error",
                status=500,
                provider=self.name,
            )
        output = simulate(request, request.model, seed=self.seed, rates=self.rates)
        latency_ms = output.latency_ms * self.latency_scale
        # Always given, as an endpoint asked for `logprobs` gives them: a run's perplexity.
        logprob_mean, logprob_tokens = chosen_logprob(request, request.model, output.output_tokens)
        if latency_ms > 0 and self.pace > 0:
            await asyncio.sleep(latency_ms * self.pace / 1000)
        return CompletionResponse(
            text=output.text,
            input_tokens=output.input_tokens,
            output_tokens=output.output_tokens,
            finish_reason=output.finish_reason,
            model_version=output.model_version,
            latency_ms=latency_ms,
            headers={SIMULATED_HEADER: "true"},
            request_id=request.request_id,
            token_entropy=(
                mean_entropy(
                    simulated_logprobs(
                        request, request.model, output.output_tokens, request.top_logprobs
                    )
                )
                if request.top_logprobs
                else None
            ),
            logprob_mean=logprob_mean,
            logprob_tokens=logprob_tokens,
        )

    async def aclose(self) -> None:
        """Nothing to close."""
