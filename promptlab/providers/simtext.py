"""The simulated model's plain-text answers: topic words, made-up sentences, and
cutting an answer to a token budget."""

from __future__ import annotations

import random
import re
from collections.abc import Iterable, Mapping, Sequence

from promptlab.providers.tokens import count_tokens

_STOPWORD_TEXT = (
    "about above after again also always because been before being below between both "
    "could does doing down during each from further have having here into itself just "
    "more most other over own same should some such than that their them then there "
    "these they this those through under until very what when where which while whom "
    "with would your yours please write give make using answer following given"
)
_STOPWORDS = frozenset(_STOPWORD_TEXT.split())
_WORD = re.compile(r"[A-Za-z][A-Za-z\-]{3,}")
_OPENERS = (
    "In short,",
    "Put simply,",
    "The key point is that",
    "First,",
    "Then,",
    "Note that",
    "In practice,",
    "Overall,",
    "As a rule,",
    "Importantly,",
    "For most readers,",
)
_VERBS = (
    "improves",
    "depends on",
    "shapes",
    "clarifies",
    "supports",
    "simplifies",
    "affects",
    "strengthens",
    "reveals",
    "balances",
)
_NOUNS = (
    "the overall result",
    "the main goal",
    "user trust",
    "the next step",
    "clarity",
    "the final outcome",
    "day-to-day use",
    "long-term value",
    "the key trade-off",
    "the expected cost",
    "response quality",
    "the first impression",
)
_FALLBACK_TOPICS = ("the request", "the product", "the answer", "the topic")


def topics(messages: Iterable[Mapping[str, str]]) -> list[str]:
    """Up to 8 distinct content words of the last non-system message (else fallbacks)."""
    user = [str(m.get("content", "")) for m in messages if m.get("role") != "system"]
    seen: dict[str, None] = {}
    for word in _WORD.findall(user[-1] if user else ""):
        low = word.lower()
        if low not in _STOPWORDS:
            seen.setdefault(low, None)
    return list(seen)[:8] or list(_FALLBACK_TOPICS)


def _pick(rng: random.Random, items: Sequence[str]) -> str:
    # Cheaper than rng.choice, which matters at fakellm's thousands of requests a second.
    return items[int(rng.random() * len(items))]


def sentence(rng: random.Random, topics: list[str]) -> str:
    """One made-up sentence about one of `topics`."""
    return f"{_pick(rng, _OPENERS)} {_pick(rng, topics)} {_pick(rng, _VERBS)} {_pick(rng, _NOUNS)}."


#: A rough words-to-tokens ratio used only to size the text before exact counting.
TOKENS_PER_WORD = 1.3


def plain_text(rng: random.Random, topics: list[str], target_tokens: int, bullets: bool) -> str:
    """Sentences (or bullets) until about `target_tokens` tokens are written."""
    sentences: list[str] = []
    words = 0
    while words * TOKENS_PER_WORD < target_tokens:
        line = sentence(rng, topics)
        sentences.append(f"- {line}" if bullets else line)
        words += line.count(" ") + 1
    return ("\n" if bullets else " ").join(sentences)


def truncate_to_tokens(text: str, max_tokens: int) -> str:
    """`text` cut at a word boundary to at most `max_tokens` tokens (one word at least)."""
    words = text.split(" ")
    tokens = count_tokens(text)
    if tokens <= max_tokens:
        return text
    keep = max(1, int(len(words) * max_tokens / tokens))
    while keep > 1 and count_tokens(" ".join(words[:keep])) > max_tokens:
        keep -= 1
    return " ".join(words[:keep])
