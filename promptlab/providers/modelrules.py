"""Which sampling parameters a model takes: both, one of temperature and top_p, or neither.

Claude Sonnet 4.5, Haiku 4.5 and Opus 4.1 answer 400 to a request that sets both
`temperature` and `top_p`; Opus 4.7 and later, Sonnet 5 and Fable, and OpenAI's
reasoning models (o1, o3, o4-mini, gpt-5) take neither. A run that sends such a request
fails every item, so the rule is in the providers file's model table (`sampling: any |
one | none`, built in for the models above) and a run breaking it is refused at submit.

Templates always carry a temperature and a top_p (their defaults fill what the author
left out), so for a model with a rule a value equal to the template default counts as
not set: it is not sent, and only values the author chose can break the rule.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from promptlab.prompts.templates import PARAM_DEFAULTS

#: Every sampling parameter may be sent (the default for models the table does not list).
ANY = "any"
#: temperature or top_p, not both.
ONE = "one"
#: Neither temperature nor top_p.
NONE = "none"
RULES = (ANY, ONE, NONE)
SAMPLING_PARAMS = ("temperature", "top_p")


def chosen(
    params: Mapping[str, Any], moving: Iterable[str] = (), *, explicit: bool = False
) -> list[str]:
    """The sampling parameters the author chose: a value other than the template default
    (any value, when `explicit`: a request line has no defaults), or one that moves per
    row or over the batch (`moving`)."""
    moved = set(moving)
    return [
        key
        for key in SAMPLING_PARAMS
        if key in moved
        or (params.get(key) is not None and (explicit or params[key] != PARAM_DEFAULTS[key]))
    ]


def broken(rule: str, chosen_params: list[str]) -> str | None:
    """What a request choosing `chosen_params` breaks under `rule`, or None."""
    if rule == ONE and len(chosen_params) > 1:
        return "takes temperature or top_p, not both"
    if rule == NONE and chosen_params:
        return "takes neither temperature nor top_p"
    return None


def refusal(
    rule: str,
    model_ref: str,
    params: Mapping[str, Any],
    moving: Mapping[str, str] | None = None,
    *,
    explicit: bool = False,
) -> str | None:
    """One line saying which model refuses which parameters, or None when it takes them.

    `moving` maps a parameter that moves to where it comes from ("column t")."""
    moving = moving or {}
    picked = chosen(params, moving, explicit=explicit)
    problem = broken(rule, picked)
    if problem is None:
        return None
    shown = ", ".join(
        f"{key} from {moving[key]}"
        if key in moving
        else f"{key} {params[key]:g}"
        if isinstance(params.get(key), int | float)
        else key
        for key in picked
    )
    fix = "drop one" if rule == ONE else "remove them"
    return f"{model_ref} {problem} ({shown}); {fix}"


def sent(
    rule: str, temperature: float | None, top_p: float | None
) -> tuple[float | None, float | None]:
    """The (temperature, top_p) a request to a model with `rule` carries."""
    if rule == ANY:
        return temperature, top_p
    picked = chosen({"temperature": temperature, "top_p": top_p})
    if rule == NONE:
        return None, None
    if picked == ["top_p"]:
        return None, top_p
    return temperature, None
