"""Django admin for the sandbox. The refund ledger is evidence for crash tests: shown, never edited."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from core.admin import ReadOnlyAdmin
from sandbox.models import SandboxFault, SandboxOrder, SandboxRefund


@admin.register(SandboxOrder)
class SandboxOrderAdmin(admin.ModelAdmin):
    list_display = [
        "order_id",
        "customer_id",
        "amount_minor",
        "currency",
        "status",
        "delivered_at",
        "category",
    ]
    list_filter = ["status", "currency"]
    search_fields = ["order_id", "customer_id"]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        # Refunds point at the order id; renaming an order would orphan its ledger.
        return ["order_id", "created_at", "updated_at"] if obj is not None else ["created_at", "updated_at"]


@admin.register(SandboxRefund)
class SandboxRefundAdmin(ReadOnlyAdmin):
    list_display = [
        "refund_id",
        "order_id",
        "amount_minor",
        "currency",
        "status",
        "idempotency_key",
        "created_at",
    ]
    search_fields = ["refund_id", "order__order_id", "idempotency_key"]


@admin.register(SandboxFault)
class SandboxFaultAdmin(admin.ModelAdmin):
    list_display = ["id", "fault", "order_id", "remaining", "delay_s", "fired", "created_at"]
    list_filter = ["fault"]
    readonly_fields = ["fired", "created_at"]
