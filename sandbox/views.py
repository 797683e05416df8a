"""The sandbox's HTTP API: plain JSON function views over the services, behind the KEEPER_SANDBOX_ENABLED gate."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from core.errors import ApplicationError
from sandbox import inputs
from sandbox.errors import (
    DropUnsupported,
    InvalidField,
    MethodNotAllowed,
    OrderNotFound,
    QueryRequired,
    SandboxDisabled,
)
from sandbox.models import MAX_ID_LENGTH, FaultName, SandboxFault, SandboxOrder, SandboxRefund
from sandbox.selectors import faults_active, order_get, order_refunded_minor, refunds_for_order
from sandbox.services import (
    MAX_DELAY_S,
    fault_add,
    faults_clear,
    order_upsert,
    refund_apply,
    refund_lookup,
)
from sandbox.transport import client_socket, connection_drop

Handler = Callable[..., HttpResponse]


def _error(exc: ApplicationError) -> JsonResponse:
    return JsonResponse({"error": {"code": exc.code, "message": exc.message}}, status=exc.http_status)


def _endpoint(**handlers: Handler) -> Handler:
    """One URL: the enable gate (read per request), dispatch by method, domain errors as JSON."""
    allowed = ", ".join(sorted(method.upper() for method in handlers))

    @csrf_exempt
    def view(request: HttpRequest, **kwargs: Any) -> HttpResponse:
        if not settings.KEEPER_SANDBOX_ENABLED:
            return _error(SandboxDisabled("the sandbox is turned off"))
        handler = handlers.get((request.method or "").lower())
        if handler is None:
            response = _error(MethodNotAllowed(f"use {allowed}"))
            response["Allow"] = allowed
            return response
        try:
            return handler(request, **kwargs)
        except ApplicationError as exc:
            return _error(exc)

    return view


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def order_json(order: SandboxOrder) -> dict[str, Any]:
    return {
        "order_id": order.order_id,
        "customer_id": order.customer_id,
        "amount_minor": order.amount_minor,
        "currency": order.currency,
        "status": order.status,
        "delivered_at": _iso(order.delivered_at),
        "category": order.category,
        "refunded_minor": order_refunded_minor(order_id=order.order_id),
    }


def refund_json(refund: SandboxRefund) -> dict[str, Any]:
    return {
        "refund_id": refund.refund_id,
        "order_id": refund.order_id,
        "amount_minor": refund.amount_minor,
        "currency": refund.currency,
        "status": refund.status,
        "idempotency_key": refund.idempotency_key,
        "created_at": _iso(refund.created_at),
    }


def fault_json(fault: SandboxFault) -> dict[str, Any]:
    return {
        "id": fault.id,
        "fault": fault.fault,
        "order_id": fault.order_id,
        "remaining": fault.remaining,
        "delay_s": fault.delay_s,
        "fired": fault.fired,
        "created_at": _iso(fault.created_at),
    }


def _order_upsert(request: HttpRequest) -> HttpResponse:
    body = inputs.json_body(request)
    category = body.get("category")
    upserted = order_upsert(
        order_id=inputs.order_id(inputs.required(body, "order_id")),
        customer_id=inputs.text(
            inputs.required(body, "customer_id"), name="customer_id", max_length=MAX_ID_LENGTH
        ),
        amount_minor=inputs.amount_minor(body),
        currency=inputs.currency(body),
        status=inputs.text(inputs.required(body, "status"), name="status"),
        delivered_at=inputs.optional_datetime(body, "delivered_at"),
        category=None if category is None else inputs.text(category, name="category"),
    )
    return JsonResponse(order_json(upserted.order), status=201 if upserted.created else 200)


def _order_detail(request: HttpRequest, order_id: str) -> HttpResponse:
    try:
        order_id = inputs.order_id(order_id)
    except InvalidField:
        raise OrderNotFound(f"no order {order_id!r}") from None  # no such id can have been seeded
    return JsonResponse(order_json(order_get(order_id=order_id)))


def _refund_create(request: HttpRequest) -> HttpResponse:
    key = inputs.idempotency_key(request.headers.get("Idempotency-Key"))
    body = inputs.json_body(request)
    applied = refund_apply(
        order_id=inputs.order_id(inputs.required(body, "order_id")),
        amount_minor=inputs.amount_minor(body),
        currency=inputs.currency(body),
        idempotency_key=key,
    )
    response = JsonResponse(refund_json(applied.refund), status=201 if applied.created else 200)
    if not applied.created:
        response["Idempotent-Replayed"] = "true"
    fault = applied.fault
    if fault is not None and fault.fault == FaultName.SLOW_RESPONSE:
        time.sleep(fault.delay_s)
    elif fault is not None and fault.fault == FaultName.DROP_AFTER_APPLY:
        sock = client_socket(request)
        if sock is None:
            raise DropUnsupported(
                f"drop_after_apply cannot drop connections under this server; refund "
                f"{applied.refund.refund_id} was applied"
            )
        connection_drop(sock)
    return response


def _refunds_query(request: HttpRequest) -> HttpResponse:
    key, order_id = request.GET.get("idempotency_key"), request.GET.get("order_id")
    if key is not None and order_id is not None:
        raise QueryRequired("give either idempotency_key or order_id, not both")
    if key is not None:
        lookup = refund_lookup(idempotency_key=inputs.idempotency_key(key))
        return JsonResponse(
            {
                "authoritative": lookup.authoritative,
                "applied": lookup.applied,
                "refund": refund_json(lookup.refund) if lookup.refund is not None else None,
            }
        )
    if order_id is not None:
        refunds = refunds_for_order(order_id=inputs.order_id(order_id))
        return JsonResponse({"results": [refund_json(refund) for refund in refunds]})
    raise QueryRequired("give idempotency_key (the authoritative lookup) or order_id (the ledger)")


def _fault_create(request: HttpRequest) -> HttpResponse:
    body = inputs.json_body(request)
    fault = fault_add(
        fault=inputs.text(inputs.required(body, "fault"), name="fault"),
        order_id=inputs.optional_order_id(body),
        remaining=inputs.optional_count(body, "remaining"),
        delay_s=inputs.seconds(body, "delay_s", default=5.0, maximum=MAX_DELAY_S),
    )
    return JsonResponse(fault_json(fault), status=201)


def _faults_list(request: HttpRequest) -> HttpResponse:
    return JsonResponse({"results": [fault_json(fault) for fault in faults_active()]})


def _faults_clear(request: HttpRequest) -> HttpResponse:
    return JsonResponse({"cleared": faults_clear()})


orders = _endpoint(post=_order_upsert)
order_detail = _endpoint(get=_order_detail)
refunds = _endpoint(get=_refunds_query, post=_refund_create)
faults = _endpoint(get=_faults_list, post=_fault_create, delete=_faults_clear)
