"""Per-run budgets of steps, tokens, cost and wall time, kept in the state under "budgets".

Every step event records what it spent, and so does every `model_usage` event (a model call made
outside a step); the state's totals can therefore be recomputed from the event log (resume does),
and a tampered or stale total is replaced by the log's. A run may also have a wall-clock deadline
(`deadline_s` from its start, waiting included), kept as budgets["deadline"] = {"limit_s", "at"}.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone

from core.errors import Conflict, InvalidInput

BUDGET_KINDS = ("steps", "tokens", "cost_usd", "wall_s")
DEADLINE = "deadline"
Budgets = dict[str, dict[str, Any]]


class BudgetExhausted(Conflict):
    """A model call refused because the run's budget is already spent (the run suspends)."""

    code = "budget_exhausted"


# The largest limits a run may ask for: a deadline past ten years could be a date beyond the
# calendar (a 500), and a limit past 1e15 is no limit at all.
MAX_LIMIT = 1e15
MAX_DEADLINE_S = 10 * 365 * 86400


def _positive(kind: str, limit: Any) -> None:
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int | float) or limit <= 0):
        raise InvalidInput(f"budget {kind} must be a positive number", code="invalid_budgets")
    highest = MAX_DEADLINE_S if kind == "deadline_s" else MAX_LIMIT
    if limit is not None and not limit <= highest:  # NaN too
        raise InvalidInput(f"budget {kind} must be at most {highest:g}", code="invalid_budgets")


def budgets_initial(*, defaults: dict[str, float], requested: Any, now: datetime | None = None) -> Budgets:
    """The run's budgets: the workflow's default limits, overridden by the input's "budgets"."""
    if requested is None:
        requested = {}
    if not isinstance(requested, dict):
        raise InvalidInput(
            "'budgets' must be an object of limits, e.g. {\"steps\": 50}", code="invalid_budgets"
        )
    allowed = (*BUDGET_KINDS, "deadline_s")
    unknown = sorted(set(requested) - set(allowed))
    if unknown:
        raise InvalidInput(
            f"unknown budget(s) {', '.join(unknown)}; use {', '.join(allowed)}", code="invalid_budgets"
        )
    budgets: Budgets = {}
    for kind in BUDGET_KINDS:
        limit = requested.get(kind, defaults.get(kind))
        _positive(kind, limit)
        budgets[kind] = {"limit": limit, "used": 0}
    deadline_s = requested.get("deadline_s", defaults.get("deadline_s"))
    _positive("deadline_s", deadline_s)
    if deadline_s is not None:
        at = (now or timezone.now()) + timedelta(seconds=float(deadline_s))
        budgets[DEADLINE] = {"limit_s": deadline_s, "at": at.isoformat()}
    return budgets


def _kept(budgets: Budgets) -> Budgets:
    """The entries that are not spent (the deadline), carried unchanged."""
    return {DEADLINE: budgets[DEADLINE]} if isinstance(budgets.get(DEADLINE), dict) else {}


# Counted in whole units: their totals stay integers (else "steps": 3.0 after a step but 0 before
# it, and 1002.0 steps on the console).
_COUNTED = ("steps", "tokens")


def budgets_spend(budgets: Budgets, spent: dict[str, float]) -> Budgets:
    """New totals (rounded the same way every time, so recomputing from events gives the same)."""

    def used(kind: str) -> float:
        total = round(float(budgets.get(kind, {}).get("used") or 0) + float(spent.get(kind, 0)), 6)
        return int(total) if kind in _COUNTED and total.is_integer() else total

    return {
        **{kind: {"limit": budgets.get(kind, {}).get("limit"), "used": used(kind)} for kind in BUDGET_KINDS},
        **_kept(budgets),
    }


def budgets_exhausted(budgets: Budgets | None) -> list[str]:
    exhausted = []
    for kind, budget in (budgets or {}).items():
        if kind not in BUDGET_KINDS or not isinstance(budget, dict):
            continue
        limit = budget.get("limit")
        if limit is not None and float(budget.get("used") or 0) >= float(limit):
            exhausted.append(kind)
    return exhausted


def budgets_describe(budgets: Budgets, kinds: Iterable[str]) -> str:
    return ", ".join(f"{k} {budgets[k]['used']}/{budgets[k]['limit']}" for k in kinds)


def budgets_deadline(budgets: Budgets | None) -> datetime | None:
    entry = (budgets or {}).get(DEADLINE)
    if not isinstance(entry, dict) or not isinstance(entry.get("at"), str):
        return None
    try:
        return datetime.fromisoformat(entry["at"])
    except ValueError:
        return None


def budgets_deadline_passed(budgets: Budgets | None, *, now: datetime | None = None) -> str | None:
    """A sentence saying the run's deadline has passed, or None (no deadline, or not yet)."""
    at = budgets_deadline(budgets)
    if at is None or (now or timezone.now()) < at:
        return None
    limit = (budgets or {})[DEADLINE].get("limit_s")
    return f"the run's deadline ({limit} s from its start, waiting included) passed at {at.isoformat()}"


def budgets_refusal(budgets: Budgets | None, *, now: datetime | None = None) -> tuple[str, str] | None:
    """Why a step may not start (budget_exhausted or deadline_passed, with a sentence), or None."""
    exhausted = budgets_exhausted(budgets)
    if exhausted and budgets is not None:
        return "budget_exhausted", budgets_describe(budgets, exhausted)
    if passed := budgets_deadline_passed(budgets, now=now):
        return "deadline_passed", passed
    return None


def budgets_recompute(budgets: Budgets, spent_per_event: Iterable[dict[str, float]]) -> Budgets:
    """Totals from the event log, keeping the limits (and the deadline)."""
    total: Budgets = {
        **{kind: {"limit": budgets.get(kind, {}).get("limit"), "used": 0} for kind in BUDGET_KINDS},
        **_kept(budgets),
    }
    for spent in spent_per_event:
        total = budgets_spend(total, spent)
    return total
