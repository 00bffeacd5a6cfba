"""The Redis scripts a sender's tickets move through, each one atomic call: claim a
chunk's tickets, take a dead sender's claim over, give a claim back, store an answer and
push it to its owner, wake the next sender waiting on it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# KEYS: claim, this sender's heartbeat. ARGV: the holder seen, the new holder, TTL, the
# heartbeat's TTL (ms). Take a dead holder's claim
# (or a claim that expired meanwhile), once.
TAKE_OVER = """
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] or not holder then
  redis.call('SET', KEYS[1], ARGV[2], 'EX', tonumber(ARGV[3]))
  redis.call('SET', KEYS[2], '1', 'PX', tonumber(ARGV[4]))
  return 1
end
return 0
"""

# KEYS: claim. ARGV: this sender. Give a claim back (a send that failed on its way).
RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""

# KEYS: ready. Wake the next sender waiting on the same answer.
WAKE = """
redis.call('RPUSH', KEYS[1], '1')
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[1]))
return 1
"""


# KEYS: answer and claim of each ticket, in pairs, then this sender's heartbeat. ARGV:
# this sender, the claim's TTL, the heartbeat's (ms). Per ticket: {ANSWERED, answer},
# {CLAIMED} (now this sender's) or {HELD, holder}. The heartbeat is set with the claims:
# after Redis restarted empty, a claim must never be seen without its holder's beat
# (another sender would take it over and send it a second time).
CLAIM = """
redis.call('SET', KEYS[#KEYS], '1', 'PX', tonumber(ARGV[3]))
local out = {}
for i = 1, #KEYS - 1, 2 do
  local answer = redis.call('GET', KEYS[i])
  if answer then
    out[#out + 1] = {1, answer}
  elseif redis.call('SET', KEYS[i + 1], ARGV[1], 'NX', 'EX', tonumber(ARGV[2])) then
    out[#out + 1] = {0}
  else
    out[#out + 1] = {2, redis.call('GET', KEYS[i + 1]) or ''}
  end
end
return out
"""
CLAIMED, ANSWERED, HELD = 0, 1, 2

# KEYS: answer, ready, the owner's replies. ARGV: answer, reply, answer TTL, ready TTL,
# 1 when the answer is the stored one (then only the reply is pushed).
FINISH = """
if ARGV[5] == '0' then
  redis.call('SET', KEYS[1], ARGV[1], 'EX', tonumber(ARGV[3]))
  redis.call('RPUSH', KEYS[2], '1')
  redis.call('EXPIRE', KEYS[2], tonumber(ARGV[4]))
end
redis.call('RPUSH', KEYS[3], ARGV[2])
redis.call('EXPIRE', KEYS[3], tonumber(ARGV[3]))
return 1
"""


@dataclass(frozen=True)
class ClaimScripts:
    """The scripts above, registered on one Redis client (each a callable script)."""

    claim: Any
    take_over: Any
    release: Any
    wake: Any
    finish: Any

    @classmethod
    def register(cls, redis: Any) -> ClaimScripts:
        return cls(
            claim=redis.register_script(CLAIM),
            take_over=redis.register_script(TAKE_OVER),
            release=redis.register_script(RELEASE),
            wake=redis.register_script(WAKE),
            finish=redis.register_script(FINISH),
        )
