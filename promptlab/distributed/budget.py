"""One rate budget per endpoint and key across every worker: GCRA in a Redis script.

Each send reserves its slot atomically (the generic cell rate algorithm, in its
scheduling form): a budget of R requests per minute spaces sends 60/R s apart, and a
request of T tokens under a TPM budget moves that budget's clock by T x 60/TPM s. The
script answers how long the caller waits before sending; every worker that shares the
endpoint and key shares the two clocks, so 1 or 4 workers together send at the limit.
A 429 pushes a shared back-off time that every later reservation starts after (the
Retry-After the server gave, else one interval). Limits are the endpoint's configured
ones, else what a response's headers said (`x-ratelimit-limit-*`), kept in Redis too.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from promptlab.providers.config import EndpointConfig

#: Seconds of sends at the limit that may go at once after a quiet spell (the GCRA's
#: burst tolerance). Providers' buckets start full, so a short burst is within them.
BURST_S = 1.0
#: Seconds a budget's keys outlive their last use.
KEY_TTL_S = 3600

# KEYS: request clock, token clock, back-off, learned limits.
# ARGV: configured rpm (0: none), configured tpm (0: none), burst ms, then each send's
# tokens. Returns, per send in order, the milliseconds to wait before sending it.
_RESERVE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local rpm = tonumber(ARGV[1])
local tpm = tonumber(ARGV[2])
if rpm == 0 then rpm = tonumber(redis.call('HGET', KEYS[4], 'rpm') or '0') end
if tpm == 0 then tpm = tonumber(redis.call('HGET', KEYS[4], 'tpm') or '0') end
local burst = tonumber(ARGV[3])
-- Nothing goes before a back-off ends, and the clocks run from then: sends reserved
-- during a back-off are spaced after it, not released at once when it ends.
local base = tonumber(redis.call('GET', KEYS[3]) or '0')
if base < now then base = now end
local function reserve(key, interval)
  local tat = tonumber(redis.call('GET', key) or '0')
  if tat < base then tat = base end
  local go = tat - burst
  if go < base then go = base end
  redis.call('SET', key, tat + interval, 'PX', math.ceil(tat + interval - now + burst) + 1000)
  return go
end
local waits = {}
for i = 4, #ARGV do
  local start = base
  if rpm > 0 then
    local go = reserve(KEYS[1], 60000 / rpm)
    if go > start then start = go end
  end
  local tokens = tonumber(ARGV[i])
  if tpm > 0 and tokens > 0 then
    local go = reserve(KEYS[2], tokens * 60000 / tpm)
    if go > start then start = go end
  end
  waits[#waits + 1] = start - now
end
return waits
"""

# KEYS: back-off. ARGV: milliseconds from now. Only ever moves the back-off later.
_BACK_OFF = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local until_ms = now + tonumber(ARGV[1])
if until_ms > tonumber(redis.call('GET', KEYS[1]) or '0') then
  redis.call('SET', KEYS[1], until_ms, 'PX', tonumber(ARGV[1]) + 1000)
end
return until_ms
"""


def budget_id(cfg: EndpointConfig, api_key: str | None) -> str:
    """The budget an endpoint's sends draw on: where it points and whose key it uses
    (the key only as a hash, never stored). Configured alike, workers agree on it."""
    digest = hashlib.sha256(
        "\0".join((cfg.name, cfg.kind, cfg.base_url or "", api_key or "")).encode()
    )
    return digest.hexdigest()[:24]


class SharedBudget:
    """The Redis side of one endpoint's budget, used by every worker (redis.asyncio)."""

    def __init__(self, redis: Any, cfg: EndpointConfig, api_key: str | None) -> None:
        self._redis = redis
        self._rpm = cfg.rpm or 0
        self._tpm = cfg.tpm or 0
        base = f"promptlab:budget:{budget_id(cfg, api_key)}"
        self.keys = (f"{base}:requests", f"{base}:tokens", f"{base}:backoff", f"{base}:limits")
        self._reserve = redis.register_script(_RESERVE)
        self._back_off = redis.register_script(_BACK_OFF)

    async def reserve_many(self, tokens: list[int]) -> list[float]:
        """Seconds each send (of `tokens` each, in order) waits before it goes; their
        slots are taken, in one call."""
        if not tokens:
            return []
        waited_ms = await self._reserve(
            keys=list(self.keys), args=[self._rpm, self._tpm, int(BURST_S * 1000), *tokens]
        )
        return [max(0.0, float(ms) / 1000) for ms in waited_ms]

    async def reserve(self, tokens: int) -> float:
        """Seconds to wait before sending a request of `tokens` (its slot is taken)."""
        return (await self.reserve_many([tokens]))[0]

    async def back_off(self, seconds: float) -> None:
        """Nobody sends on this budget for `seconds` (a 429's Retry-After)."""
        await self._back_off(keys=[self.keys[2]], args=[max(1, int(seconds * 1000))])

    async def learn(self, headers: Mapping[str, str]) -> None:
        """Keep the limits a response's headers state (for endpoints configured without)."""
        learned = {}
        for field, names in (
            ("rpm", ("x-ratelimit-limit-requests", "anthropic-ratelimit-requests-limit")),
            ("tpm", ("x-ratelimit-limit-tokens", "anthropic-ratelimit-tokens-limit")),
        ):
            configured = self._rpm if field == "rpm" else self._tpm
            value = next((headers[n] for n in names if n in headers), None)
            if not configured and value is not None and value.isdigit() and int(value) > 0:
                learned[field] = int(value)
        if learned:
            await self._redis.hset(self.keys[3], mapping=learned)
            await self._redis.expire(self.keys[3], KEY_TTL_S)
