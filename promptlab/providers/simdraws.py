"""How the simulated model samples: repeats that differ at temperature > 0. Pure.

Each output position of a simulated answer has CANDIDATES tokens whose probabilities at
temperature 1 are the model's own (`simulator.simulated_logprobs`: a good model's most
likely token takes most of the mass). Sampling at temperature T raises them to the
power 1/T and renormalizes (T = 0 is greedy: the most likely token, probability 1);
top_p then keeps the smallest set of most likely tokens whose mass reaches top_p, as
nucleus sampling does. From that distribution:

- the chosen token of each position is drawn and its log-probability reported, so a
  variant's perplexity, exp(-mean log-probability), is 1 at T = 0 and rises with T and
  top_p (`chosen_logprobs`);
- `deviation_rate` is the chance a sampled token is not the most likely one: each choice
  the simulated answer is made of (a word, an enum value, its length) is re-drawn with
  that chance when a request is one of several repeats (`Redrawing`). At T = 0 nothing is
  re-drawn and every repeat gives the same answer; the higher T and top_p, the more the
  repeats of a row differ, each the same on every run.
"""

from __future__ import annotations

import functools
import hashlib
import math
import random
from collections.abc import Sequence

#: Candidate tokens per position the sampling distribution is spread over.
CANDIDATES = 5
#: Temperatures at or below this sample greedily (no division by a vanishing T).
GREEDY_TEMPERATURE = 1e-3
#: What a request without a temperature or top_p gets, as the OpenAI API does.
DEFAULT_TEMPERATURE = 1.0
DEFAULT_TOP_P = 1.0

#: A simulated conversation as keys are made of it (simulator._messages_key).
Messages = tuple[tuple[str, ...], ...]


def keyed_rng(*parts: object) -> random.Random:
    """A generator seeded by `parts` (their repr): the same parts, the same draws."""
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return random.Random(int.from_bytes(digest, "big"))


def model_positions(
    name: str, quality: float, messages: Messages, count: int, top: int
) -> list[list[float]]:
    """The model's own log-probabilities (temperature 1) of `top` candidates at each of
    `count` positions: the first takes 0.6 x quality to quality + 0.09 of the mass, the
    rest share what is left. Deterministic per model and messages."""
    rng = keyed_rng("logprobs", name, messages)
    positions = []
    for _ in range(count):
        first = rng.uniform(0.6 * quality, min(0.995, quality + 0.09))
        rest = [rng.uniform(0.05, 1.0) for _ in range(max(0, top - 1))]
        probs = [first] + [r * (1 - first) / sum(rest) for r in rest] if rest else [1.0]
        positions.append([math.log(p) for p in probs])
    return positions


#: Positions the deviation chance is averaged over (simulator.LOGPROB_TOKENS).
DEVIATION_POSITIONS = 64


@functools.lru_cache(maxsize=4096)
def _deviation(
    name: str,
    quality: float,
    messages: Messages,
    temperature: float | None,
    top_p: float | None,
) -> float:
    positions = model_positions(name, quality, messages, DEVIATION_POSITIONS, CANDIDATES)
    return deviation_rate(positions, temperature, top_p)


def repeat_draws(
    name: str,
    quality: float,
    messages: Messages,
    temperature: float | None,
    top_p: float | None,
    sample: int | None,
    *key: object,
) -> random.Random:
    """The generator of repeat `sample`'s draws keyed by `key`: the mode's (the answer
    at temperature 0), each draw re-drawn from the repeat's own generator with the
    request's `deviation_rate`."""
    mode = keyed_rng(*key)
    rate = _deviation(name, quality, messages, temperature, top_p)
    if rate <= 0:
        return mode
    own, switch = keyed_rng(*key, "own", sample), keyed_rng(*key, "switch", sample)
    return Redrawing(mode, own, switch, rate)


def sampling_probs(
    logprobs: Sequence[float], temperature: float | None, top_p: float | None
) -> list[float]:
    """The probabilities a position is sampled from, most likely first: the model's own
    (`logprobs`, at temperature 1) tempered by `temperature`, cut to the top_p nucleus."""
    temp = DEFAULT_TEMPERATURE if temperature is None else temperature
    nucleus = DEFAULT_TOP_P if top_p is None else top_p
    ordered = sorted(logprobs, reverse=True)
    if temp <= GREEDY_TEMPERATURE:
        return [1.0]
    top = ordered[0]
    weights = [math.exp((lp - top) / temp) for lp in ordered]
    total = sum(weights)
    probs = [w / total for w in weights]
    kept, mass = [], 0.0
    for p in probs:
        kept.append(p)
        mass += p
        if mass >= nucleus:
            break
    return [p / mass for p in kept]


def deviation_rate(
    positions: Sequence[Sequence[float]], temperature: float | None, top_p: float | None
) -> float:
    """The chance a sampled token is not the most likely one, averaged over positions:
    how often a repeat re-draws each of its answer's choices (0 at temperature 0)."""
    if not positions:
        return 0.0
    tops = [sampling_probs(lps, temperature, top_p)[0] for lps in positions]
    return max(0.0, 1.0 - sum(tops) / len(tops))


def chosen_logprobs(
    positions: Sequence[Sequence[float]],
    temperature: float | None,
    top_p: float | None,
    rng: random.Random,
) -> list[float]:
    """The log-probability of the token drawn at each position (from `sampling_probs`)."""
    chosen = []
    for lps in positions:
        probs = sampling_probs(lps, temperature, top_p)
        draw, cumulative = rng.random(), 0.0
        pick = probs[-1]
        for p in probs:
            cumulative += p
            if draw < cumulative:
                pick = p
                break
        chosen.append(math.log(pick))
    return chosen


class Redrawing(random.Random):
    """A generator whose every draw is `mode`'s, or, with chance `rate`, `own`'s instead.

    `mode` is what the request answers at temperature 0; `own` is the repeat's own
    generator. Both advance on every draw, so one re-drawn choice does not shift the
    choices after it: two repeats differ only where one of them re-drew.
    """

    def __init__(
        self, mode: random.Random, own: random.Random, switch: random.Random, rate: float
    ) -> None:
        super().__init__(0)
        self._mode, self._own, self._switch, self._rate = mode, own, switch, rate

    def random(self) -> float:
        mode, own = self._mode.random(), self._own.random()
        return own if self._switch.random() < self._rate else mode

    def getrandbits(self, k: int) -> int:
        mode, own = self._mode.getrandbits(k), self._own.getrandbits(k)
        return own if self._switch.random() < self._rate else mode
