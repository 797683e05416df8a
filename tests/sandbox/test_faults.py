"""Fault injection through the test client: which fault fires, for whom, how often, and what it leaves behind."""

from __future__ import annotations

import pytest

from sandbox.models import SandboxFault, SandboxRefund
from sandbox.services import fault_add, fault_consume

pytestmark = pytest.mark.django_db


@pytest.fixture
def add_fault(post_json):
    def add(fault: str, order_id: str | None = None, remaining: int | None = None, **extra: object) -> dict:
        response = post_json(
            "/sandbox/faults", {"fault": fault, "order_id": order_id, "remaining": remaining, **extra}
        )
        assert response.status_code == 201, response.content
        return response.json()

    return add


def test_fault_is_created_listed_and_cleared(add_fault, client):
    created = add_fault("slow_response", order_id="ord-1", remaining=2, delay_s=0.25)
    assert {key: created[key] for key in ("fault", "order_id", "remaining", "delay_s", "fired")} == {
        "fault": "slow_response",
        "order_id": "ord-1",
        "remaining": 2,
        "delay_s": 0.25,
        "fired": 0,
    }
    assert isinstance(created["id"], int)
    assert add_fault("error_before_apply")["delay_s"] == 5.0
    assert [fault["id"] for fault in client.get("/sandbox/faults").json()["results"]][0] == created["id"]
    cleared = client.delete("/sandbox/faults")
    assert cleared.json() == {"cleared": 2}
    assert client.get("/sandbox/faults").json() == {"results": []}


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"fault": "meteor_strike"}, 422, "unknown_fault"),
        ({}, 400, "missing_field"),
        ({"fault": "slow_response", "remaining": 0}, 422, "invalid_field"),
        ({"fault": "slow_response", "remaining": "3"}, 422, "invalid_field"),
        ({"fault": "slow_response", "delay_s": -1}, 422, "invalid_field"),
        ({"fault": "slow_response", "delay_s": "NaN"}, 422, "invalid_field"),
        ({"fault": "slow_response", "delay_s": 10_000}, 422, "invalid_field"),
        ({"fault": "slow_response", "order_id": 7}, 422, "invalid_field"),
    ],
)
def test_bad_faults_are_refused(post_json, body, status, code):
    response = post_json("/sandbox/faults", body)
    assert response.status_code == status, response.content
    assert response.json()["error"]["code"] == code
    assert SandboxFault.objects.count() == 0


def test_error_before_apply_answers_503_and_applies_nothing(order, add_fault, refund):
    add_fault("error_before_apply", remaining=1)
    response = refund("k-1")
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "unavailable"
    assert SandboxRefund.objects.count() == 0
    # The retry with the same key now goes through: the fault was spent, not the key.
    assert refund("k-1").status_code == 201
    assert SandboxRefund.objects.count() == 1


def test_remaining_counts_down_and_the_fault_stops_firing(order, add_fault, refund, client):
    add_fault("error_before_apply", remaining=2)
    assert [refund(f"k-{n}", amount_minor=10).status_code for n in range(4)] == [503, 503, 201, 201]
    assert client.get("/sandbox/faults").json() == {"results": []}
    assert SandboxFault.objects.get().remaining == 0
    assert SandboxFault.objects.get().fired == 2


def test_fault_without_remaining_fires_until_cleared(order, add_fault, refund, client):
    add_fault("error_before_apply")
    assert [refund("k-1").status_code for _ in range(3)] == [503, 503, 503]
    assert client.delete("/sandbox/faults").json() == {"cleared": 1}
    assert refund("k-1").status_code == 201


def test_rejected_requests_and_replays_do_not_consume_apply_faults(order, add_fault, refund):
    assert refund("k-0", amount_minor=10).status_code == 201
    add_fault("error_before_apply", remaining=1)
    assert refund("k-0", amount_minor=10).status_code == 200
    assert refund("k-9", currency="USD").status_code == 422
    assert refund("k-1").status_code == 503


def test_order_fault_fires_only_for_its_order(order, post_json, add_fault, refund):
    post_json(
        "/sandbox/orders",
        {
            "order_id": "ord-2",
            "customer_id": "c",
            "amount_minor": 100,
            "currency": "EUR",
            "status": "delivered",
            "delivered_at": None,
        },
    )
    add_fault("error_before_apply", order_id="ord-2")
    assert refund("k-1").status_code == 201
    assert refund("k-2", amount_minor=50, order_id="ord-2").status_code == 503


def test_order_fault_wins_over_a_global_one(order, add_fault, refund):
    add_fault("error_before_apply", remaining=1)
    add_fault("drop_after_apply", order_id="ord-1", remaining=1)
    # The test client has no socket to drop: the order's drop fault fires (502), the global one waits.
    dropped = refund("k-1")
    assert dropped.status_code == 502
    assert dropped.json()["error"]["code"] == "drop_unsupported"
    assert SandboxRefund.objects.filter(idempotency_key="k-1").count() == 1
    assert refund("k-2").status_code == 503
    assert refund("k-3").status_code == 201


def test_slow_response_still_answers_after_the_delay(order, add_fault, refund):
    add_fault("slow_response", remaining=1, delay_s=0.2)
    response = refund("k-1")
    assert response.status_code == 201
    assert SandboxRefund.objects.count() == 1


def test_non_authoritative_lookup_hides_an_applied_refund(order, add_fault, refund, client):
    refund("k-1")
    add_fault("lookup_non_authoritative", remaining=1)
    hidden = client.get("/sandbox/refunds", {"idempotency_key": "k-1"})
    assert hidden.status_code == 200
    assert hidden.json() == {"authoritative": False, "applied": None, "refund": None}
    assert client.get("/sandbox/refunds", {"idempotency_key": "k-1"}).json()["applied"] is True


def test_unavailable_lookup_is_503(order, add_fault, refund, client):
    refund("k-1")
    add_fault("lookup_unavailable", remaining=1)
    response = client.get("/sandbox/refunds", {"idempotency_key": "k-1"})
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "unavailable"
    assert client.get("/sandbox/refunds", {"idempotency_key": "k-1"}).status_code == 200


def test_lookup_faults_match_orders_through_the_refund(order, add_fault, refund, client):
    refund("k-1")
    add_fault("lookup_unavailable", order_id="ord-1")
    assert client.get("/sandbox/refunds", {"idempotency_key": "k-1"}).status_code == 503
    # An unknown key has no order, so only global lookup faults could fire for it.
    assert client.get("/sandbox/refunds", {"idempotency_key": "k-unknown"}).json()["authoritative"] is True


def test_lookup_faults_do_not_touch_the_ledger_listing(order, add_fault, refund, client):
    refund("k-1")
    add_fault("lookup_unavailable")
    assert len(client.get("/sandbox/refunds", {"order_id": "ord-1"}).json()["results"]) == 1


def test_fault_consume_takes_the_last_firing_once():
    fault_add(fault="lookup_unavailable", remaining=1)
    kinds = frozenset({"lookup_unavailable"})
    assert fault_consume(kinds=kinds, order_id=None) is not None
    assert fault_consume(kinds=kinds, order_id=None) is None
