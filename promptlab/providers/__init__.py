"""Provider adapters: OpenAI (and compatible servers), Anthropic, and the simulator."""

from promptlab.providers.base import (
    CompletionRequest,
    CompletionResponse,
    FinishReason,
    Provider,
)

__all__ = ["CompletionRequest", "CompletionResponse", "FinishReason", "Provider"]
