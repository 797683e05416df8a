"""Per-run budgets of steps, tokens, cost and wall time, kept in the state under "budgets".

Every step event records what it spent; the state's totals can therefore be recomputed from the
event log (resume does), and a tampered or stale total is replaced by the log's.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from core.errors import InvalidInput

BUDGET_KINDS = ("steps", "tokens", "cost_usd", "wall_s")
Budgets = dict[str, dict[str, float | None]]


def budgets_initial(*, defaults: dict[str, float], requested: Any) -> Budgets:
    """The run's budgets: the workflow's default limits, overridden by the input's "budgets"."""
    if requested is None:
        requested = {}
    if not isinstance(requested, dict):
        raise InvalidInput(
            "'budgets' must be an object of limits, e.g. {\"steps\": 50}", code="invalid_budgets"
        )
    unknown = sorted(set(requested) - set(BUDGET_KINDS))
    if unknown:
        raise InvalidInput(
            f"unknown budget(s) {', '.join(unknown)}; use {', '.join(BUDGET_KINDS)}", code="invalid_budgets"
        )
    budgets: Budgets = {}
    for kind in BUDGET_KINDS:
        limit = requested.get(kind, defaults.get(kind))
        if limit is not None and (
            isinstance(limit, bool) or not isinstance(limit, int | float) or limit <= 0
        ):
            raise InvalidInput(f"budget {kind} must be a positive number", code="invalid_budgets")
        budgets[kind] = {"limit": limit, "used": 0}
    return budgets


def budgets_spend(budgets: Budgets, spent: dict[str, float]) -> Budgets:
    """New totals (rounded the same way every time, so recomputing from events gives the same)."""
    return {
        kind: {
            "limit": budgets.get(kind, {}).get("limit"),
            "used": round(float(budgets.get(kind, {}).get("used") or 0) + float(spent.get(kind, 0)), 6),
        }
        for kind in BUDGET_KINDS
    }


def budgets_exhausted(budgets: Budgets | None) -> list[str]:
    exhausted = []
    for kind, budget in (budgets or {}).items():
        limit = budget.get("limit")
        if limit is not None and float(budget.get("used") or 0) >= float(limit):
            exhausted.append(kind)
    return exhausted


def budgets_recompute(budgets: Budgets, spent_per_event: Iterable[dict[str, float]]) -> Budgets:
    """Totals from the event log, keeping the limits."""
    total: Budgets = {kind: {"limit": budgets.get(kind, {}).get("limit"), "used": 0} for kind in BUDGET_KINDS}
    for spent in spent_per_event:
        total = budgets_spend(total, spent)
    return total
