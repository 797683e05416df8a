"""The sandbox's HTTP contract through Django's test client: orders, refunds, lookups, bad input."""

from __future__ import annotations

import pytest

from sandbox.models import SandboxOrder, SandboxRefund

pytestmark = pytest.mark.django_db

ORDER = {
    "order_id": "ord-9",
    "customer_id": "cust-9",
    "amount_minor": 2599,
    "currency": "EUR",
    "status": "delivered",
    "delivered_at": "2025-03-01T10:00:00Z",
    "category": "shoes",
}


def test_order_seeding_creates_then_updates_the_same_order(post_json, client):
    created = post_json("/sandbox/orders", ORDER)
    assert created.status_code == 201, created.content
    assert created.json() == {**ORDER, "delivered_at": "2025-03-01T10:00:00+00:00", "refunded_minor": 0}

    updated = post_json("/sandbox/orders", {**ORDER, "status": "shipped", "delivered_at": None})
    assert updated.status_code == 200
    assert SandboxOrder.objects.count() == 1
    read = client.get("/sandbox/orders/ord-9").json()
    assert (read["status"], read["delivered_at"], read["category"]) == ("shipped", None, "shoes")


def test_order_without_category_reads_back_null(post_json, client):
    body = {key: value for key, value in ORDER.items() if key != "category"}
    assert post_json("/sandbox/orders", body).status_code == 201
    assert client.get("/sandbox/orders/ord-9").json()["category"] is None


def test_unknown_order_is_404(client):
    response = client.get("/sandbox/orders/nope")
    assert response.status_code == 404
    assert response.json() == {"error": {"code": "order_not_found", "message": "no order 'nope'"}}


def test_order_id_that_cannot_exist_is_404_not_a_500(client):
    response = client.get("/sandbox/orders/bad%00id")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "order_not_found"


@pytest.mark.parametrize(
    ("change", "status", "code"),
    [
        ({"amount_minor": 0}, 422, "invalid_amount"),
        ({"amount_minor": -5}, 422, "invalid_amount"),
        ({"amount_minor": "12"}, 422, "invalid_amount"),
        ({"amount_minor": 12.5}, 422, "invalid_amount"),
        ({"amount_minor": True}, 422, "invalid_amount"),
        ({"amount_minor": 2**70}, 422, "invalid_amount"),
        ({"currency": "eur"}, 422, "invalid_currency"),
        ({"currency": "EURO"}, 422, "invalid_currency"),
        ({"currency": 978}, 422, "invalid_currency"),
        ({"status": "lost"}, 422, "invalid_field"),
        ({"delivered_at": "yesterday"}, 422, "invalid_field"),
        ({"delivered_at": "2025-02-30T10:00:00"}, 422, "invalid_field"),
        ({"order_id": 12}, 422, "invalid_field"),
        ({"order_id": "a/b"}, 422, "invalid_field"),
        ({"order_id": "nul\x00"}, 422, "invalid_field"),
        ({"customer_id": "\ud800"}, 422, "invalid_field"),
        ({"category": ["x"]}, 422, "invalid_field"),
        ({"customer_id": None}, 400, "missing_field"),
    ],
)
def test_bad_order_fields_get_a_code_not_a_500(post_json, change, status, code):
    response = post_json("/sandbox/orders", {**ORDER, **change})
    assert response.status_code == status, response.content
    assert response.json()["error"]["code"] == code
    assert SandboxOrder.objects.count() == 0


@pytest.mark.parametrize("body", ["{not json", "[1, 2]", "", "[" * 100_000, b"\xff\xfe"])
def test_malformed_bodies_are_400(post_json, body):
    for url in ("/sandbox/orders", "/sandbox/faults"):
        response = post_json(url, body)
        assert response.status_code == 400, (url, response.content)
        assert response.json()["error"]["code"] == "malformed_json"


def test_oversized_body_is_400(post_json, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 100
    response = post_json("/sandbox/orders", {**ORDER, "category": "x" * 200})
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "body_too_large"
    assert SandboxOrder.objects.count() == 0


def test_reseeding_cannot_shrink_an_order_below_what_was_refunded(post_json, order, refund):
    assert refund("k-1", amount_minor=3000).status_code == 201
    response = post_json("/sandbox/orders", {**ORDER, "order_id": "ord-1", "amount_minor": 2000})
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "amount_below_refunded"
    assert SandboxOrder.objects.get(order_id="ord-1").amount_minor == 5000


def test_new_key_applies_a_refund(order, refund):
    response = refund("k-1", amount_minor=1200)
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["refund_id"].startswith("rf_") and len(body["refund_id"]) > 3
    assert {
        key: body[key] for key in ("order_id", "amount_minor", "currency", "status", "idempotency_key")
    } == {
        "order_id": "ord-1",
        "amount_minor": 1200,
        "currency": "EUR",
        "status": "applied",
        "idempotency_key": "k-1",
    }
    assert "Idempotent-Replayed" not in response.headers
    assert SandboxRefund.objects.get().refund_id == body["refund_id"]


def test_same_key_same_request_replays_the_same_refund(order, refund, client):
    first = refund("k-1")
    again = refund("k-1")
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json() == first.json()
    assert again.headers["Idempotent-Replayed"] == "true"
    assert SandboxRefund.objects.count() == 1
    assert client.get("/sandbox/orders/ord-1").json()["refunded_minor"] == 1000


@pytest.mark.parametrize("change", [{"amount_minor": 999}, {"currency": "USD"}, {"order_id": "ord-2"}])
def test_same_key_different_request_is_refused(order, refund, change):
    assert refund("k-1").status_code == 201
    response = refund("k-1", **change)
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "idempotency_key_mismatch"
    assert SandboxRefund.objects.count() == 1


def test_replay_wins_over_a_now_exhausted_order(order, refund):
    assert refund("k-1", amount_minor=5000).status_code == 201
    assert refund("k-1", amount_minor=5000).status_code == 200
    assert refund("k-2", amount_minor=1).json()["error"]["code"] == "amount_exceeds_refundable"


@pytest.mark.parametrize(
    ("kwargs", "status", "code"),
    [
        ({"order_id": "nope"}, 404, "order_not_found"),
        ({"amount_minor": 0}, 422, "invalid_amount"),
        ({"amount_minor": -100}, 422, "invalid_amount"),
        ({"amount_minor": "100"}, 422, "invalid_amount"),
        ({"amount_minor": "abc"}, 422, "invalid_amount"),
        ({"amount_minor": 10.0}, 422, "invalid_amount"),
        ({"amount_minor": None}, 400, "missing_field"),
        ({"currency": "USD"}, 422, "currency_mismatch"),
        ({"currency": 1}, 422, "invalid_currency"),
        ({"currency": None}, 400, "missing_field"),
        ({"order_id": None}, 400, "missing_field"),
        ({"order_id": ["ord-1"]}, 422, "invalid_field"),
        ({"amount_minor": 5001}, 422, "amount_exceeds_refundable"),
    ],
)
def test_refusals_apply_nothing(order, refund, kwargs, status, code):
    response = refund("k-1", **kwargs)
    assert response.status_code == status, response.content
    assert response.json()["error"]["code"] == code
    assert SandboxRefund.objects.count() == 0


def test_refunds_add_up_to_the_order_and_no_further(order, refund):
    assert refund("k-1", amount_minor=3000).status_code == 201
    assert refund("k-2", amount_minor=2000).status_code == 201
    over = refund("k-3", amount_minor=1)
    assert over.status_code == 422
    assert over.json()["error"]["code"] == "amount_exceeds_refundable"
    assert SandboxRefund.objects.count() == 2


def test_cancelled_order_is_not_refundable(post_json, order, refund):
    post_json("/sandbox/orders", {**ORDER, "order_id": "ord-1", "amount_minor": 5000, "status": "cancelled"})
    response = refund("k-1")
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "order_not_refundable"


@pytest.mark.parametrize("key", [None, "", "   ", "k" * 201, "a\x00b"])
def test_refund_needs_an_idempotency_key(order, refund, key):
    response = refund(key)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "idempotency_key_required"
    assert SandboxRefund.objects.count() == 0


def test_key_of_200_characters_is_accepted(order, refund):
    assert refund("k" * 200).status_code == 201


def test_malformed_refund_body_is_400(order, post_json):
    response = post_json("/sandbox/refunds", "{oops", **{"Idempotency-Key": "k-1"})
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "malformed_json"


def test_authoritative_lookup_says_applied_or_not(order, refund, client):
    applied = refund("k-1").json()
    found = client.get("/sandbox/refunds", {"idempotency_key": "k-1"})
    assert found.status_code == 200
    assert found.json() == {"authoritative": True, "applied": True, "refund": applied}
    missing = client.get("/sandbox/refunds", {"idempotency_key": "k-never"})
    assert missing.json() == {"authoritative": True, "applied": False, "refund": None}


def test_ledger_lists_an_orders_refunds_oldest_first(order, refund, client):
    ids = [refund(f"k-{n}", amount_minor=100).json()["refund_id"] for n in range(3)]
    response = client.get("/sandbox/refunds", {"order_id": "ord-1"})
    assert [row["refund_id"] for row in response.json()["results"]] == ids
    assert client.get("/sandbox/refunds", {"order_id": "other"}).json() == {"results": []}


@pytest.mark.parametrize(
    ("query", "code"),
    [
        ({}, "query_required"),
        ({"idempotency_key": "k", "order_id": "ord-1"}, "query_required"),
        ({"idempotency_key": ""}, "idempotency_key_required"),
    ],
)
def test_refund_queries_need_exactly_one_parameter(client, query, code):
    response = client.get("/sandbox/refunds", query)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == code


def test_wrong_method_is_a_json_405(client):
    response = client.put("/sandbox/refunds")
    assert response.status_code == 405
    assert response.json()["error"]["code"] == "method_not_allowed"
    assert response["Allow"] == "GET, POST"


def test_csrf_is_not_required(order):
    from django.test import Client

    strict = Client(enforce_csrf_checks=True)
    response = strict.post(
        "/sandbox/refunds",
        data={"order_id": "ord-1", "amount_minor": 10, "currency": "EUR"},
        content_type="application/json",
        headers={"Idempotency-Key": "k-csrf"},
    )
    assert response.status_code == 201


@pytest.mark.parametrize(
    ("method", "url"),
    [
        ("get", "/sandbox/orders/ord-1"),
        ("post", "/sandbox/orders"),
        ("post", "/sandbox/refunds"),
        ("get", "/sandbox/refunds?order_id=ord-1"),
        ("get", "/sandbox/faults"),
        ("delete", "/sandbox/faults"),
    ],
)
def test_disabled_sandbox_is_404_everywhere(client, settings, order, method, url):
    settings.KEEPER_SANDBOX_ENABLED = False
    response = getattr(client, method)(url)
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "sandbox_disabled"
    settings.KEEPER_SANDBOX_ENABLED = True
    assert getattr(client, method)(url).status_code != 404
