"""Django admin for erasure requests, read-only: erasure starts from the compliance console (it
confirms and audits) or the API; the receipt is evidence."""

from __future__ import annotations

from django.contrib import admin

from core.admin import OneTenantAdmin
from erasure.models import ErasureRequest


@admin.register(ErasureRequest)
class ErasureRequestAdmin(OneTenantAdmin):
    list_display = [
        "request_id",
        "tenant",
        "subject_digest",
        "requested_by",
        "status",
        "created_at",
        "completed_at",
    ]
    list_filter = ["status", "tenant"]
    search_fields = ["request_id", "subject_digest"]
