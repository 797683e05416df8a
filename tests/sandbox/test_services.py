"""The rules below the HTTP layer: the database constraints and the race paths of refund_apply."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, transaction

from sandbox import services
from sandbox.errors import IdempotencyKeyMismatch, OrderNotFound
from sandbox.models import SandboxFault, SandboxRefund
from sandbox.services import refund_apply

pytestmark = pytest.mark.django_db


def _apply(key: str, order_id: str = "ord-1", amount_minor: int = 1000) -> services.AppliedRefund:
    return refund_apply(order_id=order_id, amount_minor=amount_minor, currency="EUR", idempotency_key=key)


def test_the_database_refuses_a_second_row_for_a_key(order):
    first = _apply("k-1").refund
    with pytest.raises(IntegrityError), transaction.atomic():
        SandboxRefund.objects.create(
            refund_id="rf_other",
            order=order,
            amount_minor=1,
            currency="EUR",
            idempotency_key="k-1",
            request_digest=first.request_digest,
        )


@pytest.mark.parametrize(
    "values",
    [{"amount_minor": 0}, {"amount_minor": -1}, {"status": "reversed"}],
)
def test_the_database_refuses_impossible_ledger_rows(order, values):
    row = {
        "refund_id": "rf_x",
        "order": order,
        "amount_minor": 5,
        "currency": "EUR",
        "idempotency_key": "k",
        "request_digest": "sha256:x",
        **values,
    }
    with pytest.raises(IntegrityError), transaction.atomic():
        SandboxRefund.objects.create(**row)


@pytest.mark.parametrize("values", [{"fault": "gremlins"}, {"remaining": -1}, {"delay_s": -0.5}])
def test_the_database_refuses_impossible_faults(values):
    with pytest.raises(IntegrityError), transaction.atomic():
        SandboxFault.objects.create(**{"fault": "slow_response", **values})


@pytest.fixture
def racing_insert(monkeypatch):
    """Make refund_apply miss an existing key twice, as if the other request had not committed yet."""
    real = services.refund_get_by_key
    misses = {"left": 2}

    def lagging(*, idempotency_key: str) -> SandboxRefund | None:
        if misses["left"]:
            misses["left"] -= 1
            return None
        return real(idempotency_key=idempotency_key)

    def arm() -> None:
        misses["left"] = 2
        monkeypatch.setattr(services, "refund_get_by_key", lagging)

    return arm


def test_unique_violation_on_the_same_request_is_a_replay(order, racing_insert):
    first = _apply("k-1")
    racing_insert()
    again = _apply("k-1")
    assert (first.created, again.created) == (True, False)
    assert again.refund.refund_id == first.refund.refund_id
    assert SandboxRefund.objects.count() == 1


def test_unique_violation_on_another_request_is_a_mismatch(order, racing_insert):
    _apply("k-1")
    racing_insert()
    with pytest.raises(IdempotencyKeyMismatch):
        _apply("k-1", amount_minor=999)
    assert SandboxRefund.objects.count() == 1


def test_unknown_order_applies_nothing_and_spends_no_fault():
    fault = services.fault_add(fault="error_before_apply", remaining=1)
    with pytest.raises(OrderNotFound):
        _apply("k-1", order_id="missing")
    fault.refresh_from_db()
    assert (fault.remaining, fault.fired) == (1, 0)
