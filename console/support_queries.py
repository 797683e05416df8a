"""Reads for the support screens: the runs that need a person, limited to the user's tenants, and
the small formatting rules (money, countdowns, digests, bounded JSON) their rows are shown with."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from functools import reduce
from operator import or_
from typing import Any
from uuid import UUID

from django.db.models import Exists, OuterRef, Q
from django.http import Http404

from console.models import AuditEntry
from runs.engine.models import (
    AgentEvent,
    AgentRun,
    Approval,
    ApprovalStatus,
    OperationStatus,
    RunStatus,
    ToolOperation,
)
from runs.langgraph.store import THREAD_REASON as LANGGRAPH_THREAD

INBOX_LIMIT = 100  # rows per section; the oldest first, so nothing waits unseen behind newer work
RECONCILIATION_REQUIRED = "reconciliation_required"
# ISO 4217 currencies without two minor digits; every other code is shown with two.
_MINOR_DIGITS = {
    **dict.fromkeys(
        (
            "BIF",
            "CLP",
            "DJF",
            "GNF",
            "ISK",
            "JPY",
            "KMF",
            "KRW",
            "PYG",
            "RWF",
            "UGX",
            "VND",
            "VUV",
            "XAF",
            "XOF",
            "XPF",
        ),
        0,
    ),
    **dict.fromkeys(("BHD", "IQD", "JOD", "KWD", "LYD", "OMR", "TND"), 3),
}


def money_major(amount_minor: Any, currency: Any) -> str:
    """2500 EUR minor units -> "25.00 EUR"; anything that is not a whole number is flagged, shortened."""
    code = clip(str(currency or ""), 20)
    if not isinstance(amount_minor, int) or isinstance(amount_minor, bool):
        shown = json.dumps(bounded(amount_minor, 2), ensure_ascii=False, default=str)
        return f"not a whole amount: {clip(shown, 60)} {code}".strip()
    digits = _MINOR_DIGITS.get(code, 2)
    return f"{Decimal(amount_minor).scaleb(-digits):,.{digits}f} {code}".strip()


def clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def countdown(expires_at: datetime, now: datetime) -> str:
    """ "expires in 23 h 59 min", or "expired 5 min ago" (minutes rounded down, never "in 0 min")."""
    seconds = int((expires_at - now).total_seconds())
    minutes = abs(seconds) // 60
    days, hours, mins = minutes // 1440, minutes % 1440 // 60, minutes % 60
    span = (
        f"{days} d {hours} h"
        if days >= 2
        else f"{minutes // 60} h {mins} min"
        if minutes >= 60
        else f"{mins} min"
    )
    if seconds <= 0:
        return f"expired {span} ago"
    return f"expires in {span}" if minutes else "expires in under a minute"


def short_digest(digest: Any) -> str:
    return clip(str(digest or ""), 20)


def bounded(value: Any, depth: int = 8, items: int = 50) -> Any:
    """A copy of JSON-like `value` cut at `depth` levels and `items` entries per level, for display."""
    if isinstance(value, dict):
        if depth <= 0:
            return "{…}"
        cut = {str(k): bounded(v, depth - 1, items) for k, v in list(value.items())[:items]}
        return {**cut, "…": f"{len(value) - items} more"} if len(value) > items else cut
    if isinstance(value, list):
        if depth <= 0:
            return "[…]"
        kept = [bounded(v, depth - 1, items) for v in value[:items]]
        return [*kept, f"… {len(value) - items} more"] if len(value) > items else kept
    return value


def pretty_json(value: Any, limit: int = 6000) -> str:
    """Indented JSON of a bounded copy, cut at `limit` characters. The template escapes it."""
    text = json.dumps(bounded(value), indent=2, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[:limit] + "\n… (cut)"


def text_list(value: Any) -> list[str]:
    """The decider's reasons (a JSON list of strings, normally) as strings to show one per line."""
    values = value if isinstance(value, list) else [value] if value not in (None, "", {}) else []
    return [v if isinstance(v, str) else json.dumps(bounded(v, 3), ensure_ascii=False) for v in values[:50]]


# --- single objects, 404 outside the user's tenants -------------------------------------------------


def approval_for_tenants(tenant_ids: list[UUID], approval_id: UUID) -> Approval:
    approval = (
        Approval.objects.select_related("run", "tenant")
        .filter(approval_id=approval_id, tenant_id__in=tenant_ids)
        .first()
    )
    if approval is None:
        raise Http404("no such approval")
    return approval


def operation_for_tenants(tenant_ids: list[UUID], pk: int) -> ToolOperation:
    op = ToolOperation.objects.select_related("run", "tenant").filter(pk=pk, tenant_id__in=tenant_ids).first()
    if op is None:
        raise Http404("no such operation")
    return op


def last_lookup(op: ToolOperation) -> AuditEntry | None:
    """The newest lookup a person asked for from the console (recorded in the audit log)."""
    return (
        AuditEntry.objects.filter(
            tenant_id=op.tenant_id, action="lookup", target_type="operation", target_id=op.operation_id
        )
        .order_by("-id")
        .first()
    )


def resume_refusal(run: AgentRun) -> dict[str, Any] | None:
    """The failed check of the run's latest event, if that event is a refused resume."""
    event = AgentEvent.objects.filter(
        run_id=run.run_id, seq=run.state_revision, event_type="resume_refused"
    ).first()
    return _refusal_of(event) if event is not None else None


def _refusal_of(event: AgentEvent) -> dict[str, Any]:
    payload = event.payload if isinstance(event.payload, dict) else {}
    checks = [c for c in payload.get("checks") or [] if isinstance(c, dict)]
    failed = next((c for c in checks if not c.get("ok")), {})
    return {
        "event": event,
        "check": failed,
        "checks": checks,
        "requested_by": payload.get("requested_by") or "",
    }


def run_operations_in_doubt(run: AgentRun) -> list[ToolOperation]:
    return list(_in_doubt().filter(run_id=run.run_id).order_by("created_at"))


def recent_events(run: AgentRun, limit: int = 25) -> list[AgentEvent]:
    return list(AgentEvent.objects.filter(run_id=run.run_id).order_by("-seq")[:limit])


# --- the inbox -------------------------------------------------------------------------------------


@dataclass
class Inbox:
    approvals: list[dict[str, Any]] = field(default_factory=list)
    operations: list[dict[str, Any]] = field(default_factory=list)
    refused: list[dict[str, Any]] = field(default_factory=list)
    other: list[AgentRun] = field(default_factory=list)

    @property
    def total(self) -> int:
        return len(self.approvals) + len(self.operations) + len(self.refused) + len(self.other)


def approval_row(approval: Approval, now: datetime) -> dict[str, Any]:
    request = approval.request if isinstance(approval.request, dict) else {}
    return {
        "approval": approval,
        "run": approval.run,
        "order_id": request.get("order_id", ""),
        "amount": money_major(request.get("amount_minor"), request.get("currency")),
        "digest": approval.request_digest,
        "digest_short": short_digest(approval.request_digest),
        "reasons": text_list(approval.reasons),
        "countdown": countdown(approval.expires_at, now),
        "expired": approval.expires_at <= now,
    }


def operation_row(op: ToolOperation) -> dict[str, Any]:
    history = [h for h in op.history or [] if isinstance(h, dict)]
    entry = last_lookup(op)
    return {
        "op": op,
        "run": op.run,
        "last_move": history[-1] if history else {},
        "lookup": entry.details if entry is not None else None,
        "lookup_at": entry.at if entry else None,
    }


def _in_doubt() -> Any:
    """Unknown operations of active runs, and started ones whose run waits for reconciliation."""
    return ToolOperation.objects.select_related("run", "tenant").filter(
        Q(status=OperationStatus.UNKNOWN, run__status__in=[RunStatus.RUNNING, RunStatus.SUSPENDED])
        | Q(
            status=OperationStatus.STARTED,
            run__status=RunStatus.SUSPENDED,
            run__suspend_reason=RECONCILIATION_REQUIRED,
        )
    )


def support_inbox(*, tenant_ids: list[UUID], now: datetime) -> Inbox:
    inbox = Inbox()
    approvals = Approval.objects.select_related("run", "tenant").filter(
        tenant_id__in=tenant_ids, status=ApprovalStatus.PENDING
    )
    inbox.approvals = [approval_row(a, now) for a in approvals.order_by("expires_at")[:INBOX_LIMIT]]
    ops = _in_doubt().filter(tenant_id__in=tenant_ids).order_by("updated_at")[:INBOX_LIMIT]
    inbox.operations = [operation_row(op) for op in ops]

    # A LangGraph thread is "suspended" only in that Keeper's workers never step it: nobody has to act.
    suspended = (
        AgentRun.objects.select_related("tenant")
        .filter(tenant_id__in=tenant_ids, status=RunStatus.SUSPENDED)
        .exclude(suspend_reason=LANGGRAPH_THREAD)
    )
    refused_now = AgentEvent.objects.filter(
        run_id=OuterRef("run_id"), seq=OuterRef("state_revision"), event_type="resume_refused"
    )
    refused_runs = list(
        suspended.filter(Exists(refused_now))
        .exclude(suspend_reason=RECONCILIATION_REQUIRED)
        .order_by("updated_at")[:INBOX_LIMIT]
    )
    if refused_runs:
        events = AgentEvent.objects.filter(
            reduce(or_, (Q(run_id=r.run_id, seq=r.state_revision) for r in refused_runs))
        )
        by_run = {e.run_id: e for e in events}
        inbox.refused = [
            {"run": r, **_refusal_of(by_run[r.run_id])} for r in refused_runs if r.run_id in by_run
        ]

    covered = {row["run"].run_id for row in inbox.approvals + inbox.operations + inbox.refused}
    inbox.other = list(suspended.exclude(run_id__in=covered).order_by("updated_at")[:INBOX_LIMIT])
    return inbox
