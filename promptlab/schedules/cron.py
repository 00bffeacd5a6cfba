"""Cron expressions: five fields (minute hour day month weekday) or an @alias, in UTC.

croniter does the calendar arithmetic; this module bounds what it is given (a spec may
be pasted into a shared app) and turns its errors into one line naming the field.
"""

from __future__ import annotations

from datetime import UTC, datetime

from croniter import CroniterError, croniter

from promptlab.errors import SpecError

#: Longest expression taken: a real one is under 40 characters.
MAX_CRON_CHARS = 120
ALIASES = frozenset(
    {"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"}
)


def check_cron(value: object, where: str = "schedule") -> str:
    """The expression, checked; SpecError says what is wrong with it."""
    if not isinstance(value, str) or not value.strip():
        raise SpecError(f'{where}: expected a cron expression like "0 2 * * *", got {value!r}')
    expr = " ".join(value.split())
    if len(expr) > MAX_CRON_CHARS:
        raise SpecError(f"{where}: at most {MAX_CRON_CHARS} characters, got {len(expr)}")
    fields = expr.split(" ")
    if not (len(fields) == 5 or (len(fields) == 1 and expr.lower() in ALIASES)):
        raise SpecError(
            f"{where}: {expr!r} is not five fields (minute hour day month weekday) or one of "
            f"{', '.join(sorted(ALIASES))}"
        )
    if not croniter.is_valid(expr):
        raise SpecError(f"{where}: {expr!r} is not a valid cron expression")
    next_time(expr, datetime(2000, 1, 1, tzinfo=UTC), where)  # one that never fires
    return expr


def next_time(expr: str, after: datetime, where: str = "schedule") -> datetime:
    """The first time strictly after `after` (UTC) that `expr` matches."""
    try:
        found = croniter(expr, after.astimezone(UTC)).get_next(datetime)
    except CroniterError as exc:  # February 30th: croniter gives up after its search
        raise SpecError(f"{where}: {expr!r} never fires ({exc})") from exc
    return found.astimezone(UTC)
