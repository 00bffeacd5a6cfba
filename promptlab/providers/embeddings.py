"""Embeddings of texts: an OpenAI-format `/v1/embeddings` endpoint, or offline ones.

An endpoint of kind `openai` in the providers file answers with the `openai` SDK's
`embeddings.create` (its key from the env var the file names, never from a spec). The
simulated endpoint (kind `sim`) and `promptlab fakellm` give the same deterministic
embedding, `hashed_embedding`: each word hashed into one of DIMENSIONS signed slots and
the vector scaled to length 1. Texts that share words are close, texts that do not are
far: enough to find a filled prompt whose values say something else than its version
says, not a language model's sense of meaning. Results say which they came from.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from promptlab.errors import ConfigError
from promptlab.providers import read_key
from promptlab.providers.config import EndpointConfig, parse_model_ref

#: Slots of an offline embedding: room for a prompt's words with few collisions.
DIMENSIONS = 256
#: Texts per request to an endpoint (OpenAI takes up to 2,048), and their characters at
#: most (OpenAI caps a request's tokens: about 300,000, some four characters each).
BATCH = 128
BATCH_CHARS = 400_000
#: Characters of one text sent: OpenAI's 8,192-token cap for one input, at about four
#: characters a token; a longer prompt is measured by its beginning.
MAX_TEXT_CHARS = 30_000
#: Seconds an embeddings request may take.
TIMEOUT_S = 60.0
#: How an offline embedding is named wherever a result says where it came from.
OFFLINE = "offline word hashing, not a language model"

_WORDS = re.compile(r"\w+")


def hashed_embedding(text: str, dimensions: int = DIMENSIONS) -> list[float]:
    """The offline embedding of `text`: its words hashed into signed slots, length 1
    (all zeros for a text without words)."""
    vector = [0.0] * dimensions
    for word in _WORDS.findall(text.lower()):
        digest = hashlib.blake2b(word.encode(), digest_size=8).digest()
        slot = int.from_bytes(digest[:4], "big") % dimensions
        vector[slot] += 1.0 if digest[4] & 1 else -1.0
    norm = math.sqrt(sum(v * v for v in vector))
    return [v / norm for v in vector] if norm else vector


def cosine_distance(a: Sequence[float], b: Sequence[float]) -> float:
    """1 - the cosine of the angle between `a` and `b` (1 when either is all zeros)."""
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    norms = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return 1.0 - dot / norms if norms else 1.0


@dataclass(frozen=True)
class Embedder:
    """Embeddings from one endpoint's model (`ENDPOINT:MODEL`, as a variant names one)."""

    endpoint: EndpointConfig
    model: str
    api_key: str | None = None

    @classmethod
    def of(
        cls, ref: str, endpoints: Mapping[str, EndpointConfig], environ: Mapping[str, str]
    ) -> Embedder:
        """The embedder `ref` names among the providers file's `endpoints`."""
        name, model = parse_model_ref(ref)
        endpoint = endpoints.get(name)
        if endpoint is None:
            known = ", ".join(sorted(endpoints)) or "none"
            raise ConfigError(f"{ref}: no endpoint {name!r} in the providers file (known: {known})")
        if endpoint.kind not in ("sim", "openai"):
            raise ConfigError(
                f"{ref}: endpoint {name!r} is {endpoint.kind}, which has no embeddings; name "
                "an OpenAI-format endpoint or the simulated one"
            )
        try:
            return cls(endpoint, model, read_key(endpoint, environ))
        except ConfigError as exc:
            raise ConfigError(f"{ref}: {exc}") from None

    @property
    def source(self) -> str:
        """Where the embeddings come from, as results name it."""
        if self.endpoint.kind == "sim":
            return f"{self.endpoint.name}:{self.model} ({OFFLINE})"
        return f"{self.endpoint.name}:{self.model}"

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One embedding per text, in order."""
        if self.endpoint.kind == "sim":
            return [hashed_embedding(text) for text in texts]
        import openai  # the SDKs load only for an endpoint that needs them

        from promptlab.providers.errors import map_openai_error

        client = openai.OpenAI(
            api_key=self.api_key or "unused",
            base_url=self.endpoint.base_url,
            max_retries=2,
            timeout=TIMEOUT_S,
        )
        out: list[list[float]] = []
        with client:
            for batch in _batches(texts):
                try:
                    answer = client.embeddings.create(model=self.model, input=batch)
                except openai.OpenAIError as exc:
                    raise map_openai_error(exc, self.endpoint.name) from exc
                ordered = sorted(answer.data, key=lambda e: e.index)
                if len(ordered) != len(batch):
                    raise ConfigError(
                        f"{self.source}: {len(ordered)} embeddings for {len(batch)} texts"
                    )
                out.extend(list(e.embedding) for e in ordered)
        return out


def _batches(texts: Sequence[str]) -> list[list[str]]:
    """`texts` (each cut at MAX_TEXT_CHARS) in requests of at most BATCH texts and
    BATCH_CHARS characters."""
    batches: list[list[str]] = []
    size = 0
    for text in (t[:MAX_TEXT_CHARS] for t in texts):
        if not batches or len(batches[-1]) >= BATCH or size + len(text) > BATCH_CHARS:
            batches.append([])
            size = 0
        batches[-1].append(text)
        size += len(text)
    return batches
