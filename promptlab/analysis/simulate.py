"""The A/A harness: seeded traffic shaped like real logs, to measure how often a
comparison calls a difference that is not there (and how often it finds one that is).

The traffic (users, their requests and the two shapes, `logs` and `split`) is drawn in
simulate_traffic.py. `false_positive_rate` compares A/A pairs (no true difference) and
counts the pairs where any row of the table is better or worse; `power` counts the pairs
where CTR is found better under a real per-unit lift. Both go through `compare_arms`, the
code `promptlab compare` runs after its DuckDB read. `looks` re-analyses each pair at
evenly spaced times as data arrives (the always-valid method is meant to survive that).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from promptlab.analysis.compare import compare_arms, compare_paired
from promptlab.analysis.sequential import FINAL, FIXED, Look, interim

# Requests is not used here: re-exported for the tests that read an arm's requests.
from promptlab.analysis.simulate_traffic import Requests as Requests
from promptlab.analysis.simulate_traffic import Traffic, arm_sample, beta_draws, simulate_arm
from promptlab.analysis.stats import Verdict, holm_verdicts
from promptlab.records.unit_samples import COMPLETION, CTR, ArmSample, PairedSample, RatioSample


def _called(rows: list[Any], metric: str | None = None) -> bool:
    decided = (Verdict.BETTER, Verdict.WORSE)
    return any(r.verdict in decided and (metric is None or r.metric == metric) for r in rows)


def looks_of(count: int, sequential: bool, planned_units: int) -> list[tuple[float, Look]]:
    """`count` evenly spaced looks up to the horizon: with `sequential`, interim
    always-valid looks tuned to `planned_units` and the final fixed-horizon one last;
    else the plain fixed-horizon test at every look (what peeking at it would do)."""
    if not sequential:
        return [(look / count, FIXED) for look in range(1, count + 1)]
    tuned = interim(planned_units)
    return [(look / count, tuned if look < count else FINAL) for look in range(1, count + 1)]


def false_positive_rate(
    pairs: int,
    traffic: Traffic,
    *,
    looks: int = 1,
    sequential: bool = False,
    per_request: bool = False,
    cuped: bool = False,
    seed: int = 2026,
    metric: str | None = None,
) -> float:
    """The share of A/A pairs where any row of the table (after Holm; with `metric`,
    that metric's row) was called better or worse, at any of `looks` evenly spaced
    looks (`looks_of`)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(pairs):
        a, b = simulate_arm(traffic, rng), simulate_arm(traffic, rng)
        for until, look in looks_of(looks, sequential, traffic.units):
            rows = compare_arms(
                arm_sample("A", a, until, per_request),
                arm_sample("B", b, until, per_request),
                look=look,
                cuped=cuped,
            )
            if _called(holm_verdicts(rows), metric):
                hits += 1
                break
    return hits / pairs


def past_horizon_false_positive_rate(
    pairs: int, traffic: Traffic, *, looks: int = 30, horizons: int = 3, seed: int = 2027
) -> float:
    """The share of A/A pairs any interim look called, looking `looks` times while the
    data grows to `horizons` times the planned units (a plan nobody closed: production
    logs read again and again). Every look is interim, tuned to `traffic.units /
    horizons` per arm, so the whole stays within the interim share (1%)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    tuned = interim(max(1, traffic.units // horizons))
    hits = 0
    for _ in range(pairs):
        a, b = simulate_arm(traffic, rng), simulate_arm(traffic, rng)
        for step in range(1, looks + 1):
            until = step / looks
            rows = compare_arms(arm_sample("A", a, until), arm_sample("B", b, until), look=tuned)
            if _called(holm_verdicts(rows)):
                hits += 1
                break
    return hits / pairs


def power(
    pairs: int,
    traffic: Traffic,
    lift: float,
    *,
    sequential: bool = False,
    looks: int = 1,
    cuped: bool = False,
    seed: int = 7,
    only: Look | None = None,
) -> float:
    """The share of pairs where CTR was found better under a per-user relative `lift`,
    at any of `looks` (`looks_of`; `only`: one look at the horizon of that kind)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    found = 0
    schedule = [(1.0, only)] if only is not None else looks_of(looks, sequential, traffic.units)
    for _ in range(pairs):
        a = simulate_arm(traffic, rng)
        b = simulate_arm(replace(traffic, ctr_lift=lift), rng)
        for until, look in schedule:
            rows = compare_arms(
                arm_sample("A", a, until), arm_sample("B", b, until), look=look, cuped=cuped
            )
            if _called(holm_verdicts(rows), CTR):
                found += 1
                break
    return found / pairs


def bayes_call_rate(
    pairs: int,
    traffic: Traffic,
    *,
    looks: int = 1,
    metric: str | None = None,
    one_sided: bool = False,
    seed: int = 2026,
) -> float:
    """The share of A/A pairs where the Bayesian view calls a winner: a row's chance to
    beat control above CHANCE_THRESHOLD (or, unless `one_sided`, a loser: below one
    minus it), on any row (with `metric`, that row) at any of `looks` evenly spaced
    looks. Nothing corrects it for the table's size or for looking again."""
    import numpy as np

    from promptlab.analysis.bayes import CHANCE_THRESHOLD

    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(pairs):
        a, b = simulate_arm(traffic, rng), simulate_arm(traffic, rng)
        for until, look in looks_of(looks, False, traffic.units):
            rows = compare_arms(arm_sample("A", a, until), arm_sample("B", b, until), look=look)
            chances = [
                r.chance_to_beat
                for r in rows
                if r.chance_to_beat is not None and metric in (None, r.metric)
            ]
            if any(
                c > CHANCE_THRESHOLD or (not one_sided and c < 1 - CHANCE_THRESHOLD)
                for c in chances
            ):
                hits += 1
                break
    return hits / pairs


def cuped_effects(pairs: int, traffic: Traffic, seed: int = 3) -> tuple[float, float]:
    """(the mean correlation of users' experiment and pre-period CTR contributions, the
    variance of CUPED's CTR effect over A/A pairs relative to the plain one's)."""
    import numpy as np

    from promptlab.analysis.units import linearized

    rng = np.random.default_rng(seed)
    correlations: list[float] = []
    plain: list[float] = []
    adjusted: list[float] = []
    for _ in range(pairs):
        a = arm_sample("A", simulate_arm(traffic, rng))
        b = arm_sample("B", simulate_arm(traffic, rng))
        lin = linearized(a.rates[CTR])[1]
        pre = a.pre[CTR]
        correlations.append(
            np.corrcoef(lin, pre.num - pre.num.sum() / pre.den.sum() * pre.den)[0, 1]
        )
        for rows, sink in ((compare_arms(a, b), plain), (compare_arms(a, b, cuped=True), adjusted)):
            sink += [r.effect for r in rows if r.metric == CTR and r.effect is not None]
    return float(np.mean(correlations)), float(np.var(adjusted) / np.var(plain))


def simulate_pairs(rows: int, repeats: int, rng: Any) -> tuple[PairedSample, ArmSample, ArmSample]:
    """An all-mode run with no true difference: every row through both variants
    `repeats` times; rows differ in how hard they are (completion) and how long their
    answers take (latency), and both variants see the same rows."""
    import numpy as np

    difficulty = beta_draws(rng, 0.85, 3.0, rows)
    scale = 800.0 * rng.lognormal(0, 0.6, rows)
    row = np.repeat(np.arange(rows), repeats)
    done_a = rng.random(row.size) < difficulty[row]
    done_b = rng.random(row.size) < difficulty[row]
    lat_a = scale[row] * rng.lognormal(0, 0.4, row.size)
    lat_b = scale[row] * rng.lognormal(0, 0.4, row.size)
    return _paired_samples(row, done_a, done_b, lat_a, lat_b)


def _paired_samples(
    unit: Any, done_a: Any, done_b: Any, lat_a: Any, lat_b: Any
) -> tuple[PairedSample, ArmSample, ArmSample]:
    """The paired sample and both arms of simulated requests, clustered by `unit` (a
    unit index per request, from 0)."""
    import numpy as np

    units = int(unit.max()) + 1
    finished = np.bincount(unit, minlength=units).astype(np.float64)

    def completed(done: Any) -> Any:
        return np.bincount(unit, weights=done, minlength=units).astype(np.float64)

    def arm(name: str, done: Any, latency: Any) -> ArmSample:
        nothing = RatioSample(np.zeros(units), np.zeros(units))
        return ArmSample(
            name=name,
            units=units,
            requests=int(unit.size),
            unitless=0,
            rates={COMPLETION: RatioSample(completed(done), finished), CTR: nothing},
            latency=latency,
            latency_unit=unit.astype(np.int64),
        )

    pairs = PairedSample(
        name_a="A",
        name_b="B",
        rows=units,
        pairs=int(unit.size),
        finished=finished,
        completed_a=completed(done_a),
        completed_b=completed(done_b),
        latency_a=lat_a,
        latency_b=lat_b,
        latency_row=unit.astype(np.int64),
    )
    return pairs, arm("A", done_a, lat_a), arm("B", done_b, lat_b)


def paired_false_positive_rate(pairs: int, rows: int, repeats: int = 1, seed: int = 5) -> float:
    """The share of simulated all-mode A/A runs where any row of the table was called."""
    return _paired_rate(pairs, seed, "row", lambda rng: simulate_pairs(rows, repeats, rng))


def _paired_rate(
    pairs: int,
    seed: int,
    by: str,
    draw: Callable[[Any], tuple[PairedSample, ArmSample, ArmSample]],
) -> float:
    """The share of `pairs` simulated paired A/A runs (`draw(rng)`, analysed per `by`)
    where any row of the table was called."""
    import numpy as np

    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(pairs):
        paired, a, b = draw(rng)
        hits += _called(holm_verdicts(compare_paired(paired, a, b, by=by)))
    return hits / pairs


def simulate_sessions(
    sessions: int, rng: Any, max_turns: int = 10, per_turn: bool = False
) -> tuple[PairedSample, ArmSample, ArmSample]:
    """A replayed conversation log through two identical versions: sessions of 1 to
    `max_turns` turns, and each version answers a given session in a style of its own
    (long or short answers, so slower or faster) on every turn of it: the turns of a
    session are not independent. Clustered by session, or (`per_turn`, the mistake)
    with every turn a unit of its own."""
    import numpy as np

    turns = rng.integers(1, max_turns + 1, sessions)
    session = np.repeat(np.arange(sessions), turns)
    difficulty = beta_draws(rng, 0.9, 4.0, sessions)
    style_a = rng.lognormal(0, 0.5, sessions)  # the version's style in that session
    style_b = rng.lognormal(0, 0.5, sessions)
    done_a = rng.random(session.size) < difficulty[session]
    done_b = rng.random(session.size) < difficulty[session]
    lat_a = 900.0 * style_a[session] * rng.lognormal(0, 0.3, session.size)
    lat_b = 900.0 * style_b[session] * rng.lognormal(0, 0.3, session.size)
    unit = np.arange(session.size) if per_turn else session
    return _paired_samples(unit, done_a, done_b, lat_a, lat_b)


def session_false_positive_rate(
    pairs: int, sessions: int, per_turn: bool = False, seed: int = 11
) -> float:
    """The share of simulated A/A replays where any row of the table was called."""
    by = "row" if per_turn else "session"
    return _paired_rate(
        pairs, seed, by, lambda rng: simulate_sessions(sessions, rng, per_turn=per_turn)
    )


def simulate_users(
    users: int, rng: Any, max_sessions: int = 4, max_turns: int = 6, per_session: bool = False
) -> tuple[PairedSample, ArmSample, ArmSample]:
    """A replayed log whose users come back: each user has 1 to `max_sessions` sessions
    of 1 to `max_turns` turns, and each of two identical versions answers a given user in
    a style of its own in every session of theirs (a user's sessions are not independent).
    Clustered by user (a replay with `unit_column`), or (`per_session`, the mistake when
    users repeat) by session."""
    import numpy as np

    sessions_of = rng.integers(1, max_sessions + 1, users)
    session_user = np.repeat(np.arange(users), sessions_of)
    turns = rng.integers(1, max_turns + 1, session_user.size)
    session = np.repeat(np.arange(session_user.size), turns)
    user = session_user[session]
    difficulty = beta_draws(rng, 0.9, 4.0, users)
    style_a = rng.lognormal(0, 0.5, users)  # the version's style with that user
    style_b = rng.lognormal(0, 0.5, users)
    done_a = rng.random(session.size) < difficulty[user]
    done_b = rng.random(session.size) < difficulty[user]
    lat_a = 900.0 * style_a[user] * rng.lognormal(0, 0.3, session.size)
    lat_b = 900.0 * style_b[user] * rng.lognormal(0, 0.3, session.size)
    return _paired_samples(session if per_session else user, done_a, done_b, lat_a, lat_b)


def user_false_positive_rate(
    pairs: int, users: int, per_session: bool = False, seed: int = 13
) -> float:
    """The share of simulated A/A replays of returning users where any row was called."""
    by = "session" if per_session else "user"
    return _paired_rate(
        pairs, seed, by, lambda rng: simulate_users(users, rng, per_session=per_session)
    )
