"""fakellm's `POST /v1/embeddings`: OpenAI's embeddings wire format, answered with the
deterministic offline embedding (promptlab/providers/embeddings.py `hashed_embedding`),
so a test over HTTP sees what the simulated endpoint gives offline."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from promptlab.fakellm import wire
from promptlab.providers.embeddings import hashed_embedding

#: What one request may carry, as OpenAI bounds it (2,048 inputs).
MAX_INPUTS = 2048
#: Characters of one input: OpenAI's 8,192-token cap, at about four characters a token.
MAX_INPUT_CHARS = 32_768
#: Bytes of a request body: aiohttp's own bound for every route (its client_max_size).
MAX_BODY = 1 << 20


def add_embedding_routes(app: web.Application) -> None:
    app.router.add_post("/v1/embeddings", embeddings_handler)


def _refused(message: str, param: str | None = None) -> web.Response:
    body = wire.openai_error(message, "invalid_request_error", None, param)
    return web.Response(status=400, body=body, content_type="application/json")


async def embeddings_handler(request: web.Request) -> web.Response:
    if (request.content_length or 0) > MAX_BODY:
        return _refused(f"the body is over {MAX_BODY} bytes")
    try:
        data: Any = json.loads(await request.read())
    except ValueError:
        return _refused("the body is not JSON")
    if not isinstance(data, dict) or not isinstance(data.get("model"), str):
        return _refused("model: a string is required", "model")
    texts = data.get("input")
    if isinstance(texts, str):
        texts = [texts]
    if (
        not isinstance(texts, list)
        or not 0 < len(texts) <= MAX_INPUTS
        or not all(isinstance(t, str) and len(t) <= MAX_INPUT_CHARS for t in texts)
    ):
        return _refused(
            f"input: a string or 1 to {MAX_INPUTS} strings of at most {MAX_INPUT_CHARS} "
            "characters each",
            "input",
        )
    words = sum(len(t.split()) for t in texts)
    body = {
        "object": "list",
        "data": [
            {"object": "embedding", "index": i, "embedding": hashed_embedding(text)}
            for i, text in enumerate(texts)
        ],
        "model": data["model"],
        "usage": {"prompt_tokens": words, "total_tokens": words},
    }
    return web.json_response(body)
