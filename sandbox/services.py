"""The sandbox's rules: seeding orders, applying a refund at most once per key, lookups, faults."""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from datetime import datetime

from django.db import IntegrityError, transaction
from django.db.models import F, Q
from django.utils import timezone

from core.digests import json_digest
from sandbox.errors import (
    AmountBelowRefunded,
    AmountExceedsRefundable,
    CurrencyMismatch,
    IdempotencyKeyMismatch,
    InvalidAmount,
    InvalidCurrency,
    InvalidField,
    OrderNotFound,
    OrderNotRefundable,
    Unavailable,
    UnknownFault,
)
from sandbox.models import (
    APPLY_FAULTS,
    LOOKUP_FAULTS,
    FaultName,
    OrderStatus,
    SandboxFault,
    SandboxOrder,
    SandboxRefund,
)
from sandbox.selectors import fault_candidates, order_refunded_minor, refund_get_by_key

CURRENCY_CODE = re.compile(r"[A-Z]{3}")
MAX_DELAY_S = 300.0


@dataclass(frozen=True)
class UpsertedOrder:
    order: SandboxOrder
    created: bool


@dataclass(frozen=True)
class AppliedRefund:
    refund: SandboxRefund
    # False: the key was seen before with the same request, and this is that refund again.
    created: bool
    # slow_response or drop_after_apply: the transport must act on it after the refund is committed.
    fault: SandboxFault | None = None


@dataclass(frozen=True)
class RefundLookup:
    authoritative: bool
    applied: bool | None
    refund: SandboxRefund | None


def order_upsert(
    *,
    order_id: str,
    customer_id: str,
    amount_minor: int,
    currency: str,
    status: str,
    delivered_at: datetime | None,
    category: str | None = None,
) -> UpsertedOrder:
    """Create the order, or overwrite it with these values (seeding twice is harmless)."""
    if amount_minor <= 0:
        raise InvalidAmount("amount_minor must be positive")
    if not CURRENCY_CODE.fullmatch(currency):
        raise InvalidCurrency("currency must be three upper-case letters, e.g. EUR")
    if status not in OrderStatus.values:
        raise InvalidField(f"status must be one of {', '.join(OrderStatus.values)}")
    values = {
        "customer_id": customer_id,
        "amount_minor": amount_minor,
        "currency": currency,
        "status": status,
        "delivered_at": delivered_at,
        "category": category,
    }
    with transaction.atomic():
        order, created = SandboxOrder.objects.select_for_update().get_or_create(
            order_id=order_id, defaults=values
        )
        if created:
            return UpsertedOrder(order=order, created=True)
        # Re-seeding must not make the ledger lie: refunds stay within the order, in its currency.
        refunded = order_refunded_minor(order_id=order_id)
        if refunded and currency != order.currency:
            raise CurrencyMismatch(f"order {order_id!r} has refunds in {order.currency}")
        if amount_minor < refunded:
            raise AmountBelowRefunded(f"order {order_id!r} already has {refunded} refunded")
        for name, value in values.items():
            setattr(order, name, value)
        order.updated_at = timezone.now()
        order.save()
    return UpsertedOrder(order=order, created=False)


def refund_request_digest(*, order_id: str, amount_minor: int, currency: str) -> str:
    return json_digest({"order_id": order_id, "amount_minor": amount_minor, "currency": currency})


def refund_apply(*, order_id: str, amount_minor: int, currency: str, idempotency_key: str) -> AppliedRefund:
    """Apply a refund once per idempotency key; the same key and request again returns that refund.

    The unique key settles races between requests with one key; the row lock on the order settles
    races between keys, so concurrent refunds can never exceed the order. An apply fault fires only
    on a request that would apply a new refund, and is consumed in the same transaction.
    """
    if amount_minor <= 0:
        raise InvalidAmount("amount_minor must be positive")
    digest = refund_request_digest(order_id=order_id, amount_minor=amount_minor, currency=currency)
    existing = refund_get_by_key(idempotency_key=idempotency_key)
    if existing is not None:
        return _replayed(existing, digest)
    refund: SandboxRefund | None = None
    try:
        with transaction.atomic():
            order = SandboxOrder.objects.select_for_update().filter(order_id=order_id).first()
            if order is None:
                raise OrderNotFound(f"no order {order_id!r}")
            # A request with the same key may have committed while this one waited for the lock.
            existing = refund_get_by_key(idempotency_key=idempotency_key)
            if existing is not None:
                return _replayed(existing, digest)
            _check_refundable(order=order, amount_minor=amount_minor, currency=currency)
            fault = fault_consume(kinds=APPLY_FAULTS, order_id=order_id)
            if fault is None or fault.fault != FaultName.ERROR_BEFORE_APPLY:
                refund = SandboxRefund.objects.create(
                    refund_id=f"rf_{secrets.token_hex(12)}",
                    order=order,
                    amount_minor=amount_minor,
                    currency=currency,
                    idempotency_key=idempotency_key,
                    request_digest=digest,
                )
    except IntegrityError:
        # The same key was inserted concurrently for another order; the constraint decided.
        existing = refund_get_by_key(idempotency_key=idempotency_key)
        if existing is None:
            raise
        return _replayed(existing, digest)
    if refund is None:
        # Raised after the block so the consumed firing commits while nothing is applied.
        raise Unavailable("the payments service is unavailable (injected fault); nothing was applied")
    return AppliedRefund(refund=refund, created=True, fault=fault)


def _replayed(refund: SandboxRefund, digest: str) -> AppliedRefund:
    if refund.request_digest != digest:
        raise IdempotencyKeyMismatch(
            f"idempotency key {refund.idempotency_key!r} was already used for another request "
            f"(refund {refund.refund_id})"
        )
    return AppliedRefund(refund=refund, created=False)


def _check_refundable(*, order: SandboxOrder, amount_minor: int, currency: str) -> None:
    if order.status == OrderStatus.CANCELLED:
        raise OrderNotRefundable(f"order {order.order_id!r} is cancelled")
    if currency != order.currency:
        raise CurrencyMismatch(f"order {order.order_id!r} is in {order.currency}, not {currency}")
    refunded = order_refunded_minor(order_id=order.order_id)
    if refunded + amount_minor > order.amount_minor:
        raise AmountExceedsRefundable(
            f"order {order.order_id!r}: {refunded} of {order.amount_minor} already refunded, "
            f"{amount_minor} more would exceed it"
        )


def refund_lookup(*, idempotency_key: str) -> RefundLookup:
    """The authoritative answer to "did this key apply?", unless a lookup fault fires.

    An order's own lookup faults match through the refund's order; for an unknown key only global
    lookup faults can fire (the sandbox cannot tell which order the caller meant).
    """
    refund = refund_get_by_key(idempotency_key=idempotency_key)
    fault = fault_consume(kinds=LOOKUP_FAULTS, order_id=refund.order_id if refund is not None else None)
    if fault is not None and fault.fault == FaultName.LOOKUP_UNAVAILABLE:
        raise Unavailable("the lookup is unavailable (injected fault)")
    if fault is not None and fault.fault == FaultName.LOOKUP_NON_AUTHORITATIVE:
        return RefundLookup(authoritative=False, applied=None, refund=None)
    return RefundLookup(authoritative=True, applied=refund is not None, refund=refund)


def fault_add(
    *, fault: str, order_id: str | None = None, remaining: int | None = None, delay_s: float = 5.0
) -> SandboxFault:
    if fault not in FaultName.values:
        raise UnknownFault(f"unknown fault {fault!r}; known: {', '.join(FaultName.values)}")
    if remaining is not None and remaining < 1:
        raise InvalidField("remaining must be at least 1, or null for until cleared")
    if not 0 <= delay_s <= MAX_DELAY_S:
        raise InvalidField(f"delay_s must be between 0 and {MAX_DELAY_S}")
    return SandboxFault.objects.create(fault=fault, order_id=order_id, remaining=remaining, delay_s=delay_s)


def faults_clear() -> int:
    """Delete every fault, spent ones included; returns how many rows went."""
    deleted, _ = SandboxFault.objects.all().delete()
    return deleted


def fault_consume(*, kinds: frozenset[str], order_id: str | None) -> SandboxFault | None:
    """Fire the first matching fault (the order's own before global ones) and count it down.

    The UPDATE re-checks remaining under the row lock, so when two requests race for the last
    firing one gets 0 rows and moves on to the next candidate.
    """
    for candidate in fault_candidates(kinds=kinds, order_id=order_id):
        taken = SandboxFault.objects.filter(
            Q(remaining__isnull=True) | Q(remaining__gt=0), pk=candidate.pk
        ).update(remaining=F("remaining") - 1, fired=F("fired") + 1)  # NULL - 1 stays NULL
        if taken:
            return candidate
    return None
