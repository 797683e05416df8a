"""A strict five-field cron expression (minute hour day-of-month month day-of-week) and its slots, in UTC.

Each field is `*`, a number, a range `a-b`, a step `*/n` or `a-b/n`, or a comma list of those. Day of
week is 0-6 (0 and 7 are Sunday). As in Vixie cron, when both day fields are restricted a day matches
if either does. Names (`MON`, `JAN`) and `@hourly`-style shortcuts are not accepted.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from core.errors import InvalidInput

_FIELDS = (
    ("minute", 0, 59),
    ("hour", 0, 23),
    ("day of month", 1, 31),
    ("month", 1, 12),
    ("day of week", 0, 7),
)
# How far a search for the next (or previous) slot looks: "0 0 29 2 *" fires once in four years.
_SEARCH_DAYS = 366 * 8 + 2


def _invalid(expression: str, why: str) -> InvalidInput:
    return InvalidInput(f"cron expression {expression!r} does not parse: {why}", code="invalid_cron")


def _number(text: str, name: str, low: int, high: int, expression: str) -> int:
    if not (text.isascii() and text.isdigit()):
        raise _invalid(expression, f"{name} {text!r} is not a number")
    value = int(text)
    if not low <= value <= high:
        raise _invalid(expression, f"{name} {value} is outside {low}-{high}")
    return value


def _field(text: str, name: str, low: int, high: int, expression: str) -> frozenset[int]:
    values: set[int] = set()
    for part in text.split(","):
        base, slash, step_text = part.partition("/")
        step = 1
        if slash:
            step = _number(step_text, f"{name} step", 1, high - low + 1, expression)
        if base == "*":
            start, end = low, high
        elif "-" in base:
            a, _, b = base.partition("-")
            start, end = (_number(a, name, low, high, expression), _number(b, name, low, high, expression))
            if start > end:
                raise _invalid(expression, f"{name} range {base!r} runs backwards")
        else:
            start = _number(base, name, low, high, expression)
            end = high if slash else start
        values.update(range(start, end + 1, step))
    return frozenset(values)


@dataclass(frozen=True)
class Cron:
    expression: str
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday ... 6 = Saturday
    any_day: bool
    any_weekday: bool

    def _day_matches(self, day: date) -> bool:
        if day.month not in self.months:
            return False
        by_day = day.day in self.days
        by_weekday = (day.isoweekday() % 7) in self.weekdays
        if self.any_day and self.any_weekday:
            return True
        if self.any_day:
            return by_weekday
        if self.any_weekday:
            return by_day
        return by_day or by_weekday

    def _times(self) -> list[tuple[int, int]]:
        return sorted((h, m) for h in self.hours for m in self.minutes)

    def next_after(self, moment: datetime) -> datetime:
        """The first slot strictly after `moment`."""
        start = moment.astimezone(UTC).replace(second=0, microsecond=0) + timedelta(minutes=1)
        times = self._times()
        for offset in range(_SEARCH_DAYS):
            day = start.date() + timedelta(days=offset)
            if not self._day_matches(day):
                continue
            for hour, minute in times:
                slot = datetime(day.year, day.month, day.day, hour, minute, tzinfo=UTC)
                if slot >= start:
                    return slot
        raise _invalid(self.expression, "it never fires")

    def latest_at_or_before(self, moment: datetime) -> datetime | None:
        """The last slot at or before `moment` (None if there was none in the searched years)."""
        end = moment.astimezone(UTC).replace(second=0, microsecond=0)
        times = self._times()[::-1]
        for offset in range(_SEARCH_DAYS):
            day = end.date() - timedelta(days=offset)
            if not self._day_matches(day):
                continue
            for hour, minute in times:
                slot = datetime(day.year, day.month, day.day, hour, minute, tzinfo=UTC)
                if slot <= end:
                    return slot
        return None


def cron_parse(expression: str) -> Cron:
    """The parsed expression, or InvalidInput (code invalid_cron) saying what is wrong with it."""
    if not isinstance(expression, str):
        raise InvalidInput("a cron expression is a string", code="invalid_cron")
    parts = expression.split()
    if len(parts) != 5:
        raise _invalid(expression, f"it needs 5 fields (minute hour day month weekday), not {len(parts)}")
    fields = [
        _field(p, name, low, high, expression) for p, (name, low, high) in zip(parts, _FIELDS, strict=True)
    ]
    weekdays = frozenset(d % 7 for d in fields[4])
    cron = Cron(
        expression=" ".join(parts),
        minutes=fields[0],
        hours=fields[1],
        days=fields[2],
        months=fields[3],
        weekdays=weekdays,
        any_day=parts[2].startswith("*"),
        any_weekday=parts[4].startswith("*"),
    )
    cron.next_after(datetime(2000, 1, 1, tzinfo=UTC))  # "0 0 31 2 *" never fires: refuse it now
    return cron
