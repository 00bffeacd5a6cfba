"""One rate budget per endpoint and key across every worker: GCRA in a Redis script.

Each send reserves its slot atomically (the generic cell rate algorithm, in its
scheduling form): a budget of R requests per minute spaces sends 60/R s apart, and a
request of T tokens under a TPM budget moves that budget's clock by T x 60/TPM s. The
script answers how long the caller waits before sending; every worker that shares the
endpoint and key shares the two clocks, so 1 or 4 workers together send at the limit.
A 429 pushes a shared back-off time that every later reservation starts after (the
Retry-After the server gave, else one interval). Limits are the endpoint's configured
ones, else what a response's headers said (`x-ratelimit-limit-*`), kept in Redis too.

Each clock holds the provider's bucket much as the in-process limiter does
(promptlab/engine/send/limiter.py `_follow_remaining`): its burst is the most a
response's `x-ratelimit-remaining-*` header ever said (at least BURST_S of sends, and
one send), so a provider that keeps ten seconds of requests gets them spent at once by
every worker together, not one second's worth; what a response says remains caps what
the clock lets go (sends made before the limit was known, or by another client, are so
counted), and a 429 empties it. Unlike the in-process limiter it does not take off the
sends still on their way, which no worker knows of the others: the cap is the looser
one, and a 429's back-off catches what it lets through.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from promptlab.providers.config import EndpointConfig

#: Seconds of sends at the limit that may go at once after a quiet spell (the GCRA's
#: burst tolerance), until a provider's headers show it holds more: its buckets start
#: full, so a short burst is within them.
BURST_S = 1.0
#: Seconds a budget's keys outlive their last use.
KEY_TTL_S = 3600

# KEYS: request clock, token clock, back-off, learned limits.
# ARGV: configured rpm (0: none), configured tpm (0: none), least burst ms, then each
# send's tokens. Returns, per send in order, the milliseconds to wait before sending it.
_RESERVE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local rpm = tonumber(ARGV[1])
local tpm = tonumber(ARGV[2])
if rpm == 0 then rpm = tonumber(redis.call('HGET', KEYS[4], 'rpm') or '0') end
if tpm == 0 then tpm = tonumber(redis.call('HGET', KEYS[4], 'tpm') or '0') end
local least = tonumber(ARGV[3])
-- The burst a clock tolerates: the most the provider's bucket was seen to hold.
local function burst_of(field, interval)
  local held = tonumber(redis.call('HGET', KEYS[4], field) or '0') * interval
  if held > least then return held end
  return least
end
-- Nothing goes before a back-off ends, and the clocks run from then: sends reserved
-- during a back-off are spaced after it, not released at once when it ends.
local base = tonumber(redis.call('GET', KEYS[3]) or '0')
if base < now then base = now end
local function reserve(key, interval, burst)
  local tat = tonumber(redis.call('GET', key) or '0')
  if tat < base then tat = base end
  -- A bucket holds at least one send (as the in-process limiter's does): an idle
  -- clock's first send goes at once, however much it costs.
  if burst < interval then burst = interval end
  -- A send goes once the bucket holds all it costs: a 500-token request waits for
  -- 500 tokens, not only for the bucket to be no longer empty.
  local go = tat + interval - burst
  if go < base then go = base end
  redis.call('SET', key, tat + interval, 'PX', math.ceil(tat + interval - now + burst) + 1000)
  return go
end
local request_burst, token_burst = least, least
if rpm > 0 then request_burst = burst_of('requests_held', 60000 / rpm) end
if tpm > 0 then token_burst = burst_of('tokens_held', 60000 / tpm) end
local waits = {}
for i = 4, #ARGV do
  local start = base
  if rpm > 0 then
    local go = reserve(KEYS[1], 60000 / rpm, request_burst)
    if go > start then start = go end
  end
  local tokens = tonumber(ARGV[i])
  if tpm > 0 and tokens > 0 then
    local go = reserve(KEYS[2], tokens * 60000 / tpm, token_burst)
    if go > start then start = go end
  end
  waits[#waits + 1] = start - now
end
return waits
"""

# KEYS: request clock, token clock, learned limits. ARGV: configured rpm (0: none),
# configured tpm (0: none), least burst ms, then the requests and the tokens a response
# said remain (-1: not said). Keeps the most each was ever said (the bucket's size, which
# `_RESERVE` takes as the clock's burst), and holds each clock back to what remains.
_FOLLOW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local least = tonumber(ARGV[3])
local function follow(key, field, per_minute, remaining)
  if remaining < 0 then return end
  local held = tonumber(redis.call('HGET', KEYS[3], field) or '0')
  if remaining > held then
    held = remaining
    redis.call('HSET', KEYS[3], field, held)
  end
  if per_minute <= 0 then return end
  local interval = 60000 / per_minute
  local burst = held * interval
  if burst < least then burst = least end
  -- The provider had `remaining` left when it answered (our sends still on their way
  -- not counted there yet): the clock may hold no more than that. Sends made before
  -- the limit was known, which the clock never saw, are counted so.
  local floor = now + burst - remaining * interval
  if floor > tonumber(redis.call('GET', key) or '0') then
    redis.call('SET', key, floor, 'PX', math.ceil(floor - now + burst) + 1000)
  end
end
local rpm = tonumber(ARGV[1])
local tpm = tonumber(ARGV[2])
if rpm == 0 then rpm = tonumber(redis.call('HGET', KEYS[3], 'rpm') or '0') end
if tpm == 0 then tpm = tonumber(redis.call('HGET', KEYS[3], 'tpm') or '0') end
follow(KEYS[1], 'requests_held', rpm, tonumber(ARGV[4]))
follow(KEYS[2], 'tokens_held', tpm, tonumber(ARGV[5]))
return 1
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
        self._follow = redis.register_script(_FOLLOW)

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
        """Nobody sends on this budget for `seconds` (a 429's Retry-After), and then the
        provider's bucket is taken as empty: sends go at its rate, not as a burst."""
        await self._back_off(keys=[self.keys[2]], args=[max(1, int(seconds * 1000))])
        await self._remaining(0, 0)

    async def _remaining(self, requests: int, tokens: int) -> None:
        """What the provider says remains of each bucket (-1: not said), in the clocks."""
        args = [self._rpm, self._tpm, int(BURST_S * 1000), requests, tokens]
        await self._follow(keys=[self.keys[0], self.keys[1], self.keys[3]], args=args)

    async def learn(self, headers: Mapping[str, str]) -> None:
        """Keep the limits a response's headers state (for endpoints configured without);
        follow what they say remains (every endpoint's burst, and its clocks)."""
        lower = {k.lower(): v for k, v in headers.items()}
        learned: dict[str, int] = {}
        remaining: list[int] = []
        for unit, configured in (("requests", self._rpm), ("tokens", self._tpm)):
            limit = _count(lower, f"x-ratelimit-limit-{unit}", f"anthropic-ratelimit-{unit}-limit")
            if not configured and limit:
                learned["rpm" if unit == "requests" else "tpm"] = limit
            left = _count(
                lower, f"x-ratelimit-remaining-{unit}", f"anthropic-ratelimit-{unit}-remaining"
            )
            remaining.append(-1 if left is None else left)
        if learned:
            await self._redis.hset(self.keys[3], mapping=learned)
        if learned or remaining != [-1, -1]:
            await self._remaining(*remaining)
            await self._redis.expire(self.keys[3], KEY_TTL_S)


def _count(headers: Mapping[str, str], *names: str) -> int | None:
    """The first of `names` that holds a whole number (a header's count)."""
    value = next((headers[n] for n in names if n in headers), None)
    return int(value) if value is not None and value.isdigit() else None
