"""Reads of the sandbox: orders with what was refunded, the ledger, active faults."""

from __future__ import annotations

from django.db.models import Q, QuerySet, Sum

from sandbox.errors import OrderNotFound
from sandbox.models import SandboxFault, SandboxOrder, SandboxRefund


def order_get(*, order_id: str) -> SandboxOrder:
    order = SandboxOrder.objects.filter(order_id=order_id).first()
    if order is None:
        raise OrderNotFound(f"no order {order_id!r}")
    return order


def order_refunded_minor(*, order_id: str) -> int:
    total = SandboxRefund.objects.filter(order_id=order_id).aggregate(total=Sum("amount_minor"))["total"]
    return int(total or 0)


def refund_get_by_key(*, idempotency_key: str) -> SandboxRefund | None:
    return SandboxRefund.objects.filter(idempotency_key=idempotency_key).first()


def refunds_for_order(*, order_id: str) -> list[SandboxRefund]:
    return list(SandboxRefund.objects.filter(order_id=order_id).order_by("created_at", "id"))


def faults_active() -> QuerySet[SandboxFault]:
    return SandboxFault.objects.filter(Q(remaining__isnull=True) | Q(remaining__gt=0)).order_by("id")


def fault_candidates(*, kinds: frozenset[str], order_id: str | None) -> list[SandboxFault]:
    """Active faults of these kinds that could fire: the order's own first, then global ones, oldest first."""
    scope = Q(order_id__isnull=True) if order_id is None else Q(order_id=order_id) | Q(order_id__isnull=True)
    faults = faults_active().filter(scope, fault__in=kinds)
    return sorted(faults, key=lambda fault: (fault.order_id is None, fault.id))
