"""Django admin for memory: items, vectors and tombstones, all shown read-only (memory changes
through its services; tombstones are evidence)."""

from __future__ import annotations

from django.contrib import admin

from core.admin import OneTenantAdmin
from memory.models import MemoryItem, MemoryVector, Tombstone
from memory.poisoning.models import HeldClaim
from memory.procedures.models import Procedure, ProcedureSource


@admin.register(MemoryItem)
class MemoryItemAdmin(OneTenantAdmin):
    """Writes, supersessions and invalidations go through memory's services (they keep the history)."""

    list_display = ["memory_id", "tenant", "subject_id", "namespace", "key", "valid_from", "invalidated_at"]
    list_filter = ["namespace", "tenant"]
    search_fields = ["memory_id", "subject_id", "key"]


@admin.register(MemoryVector)
class MemoryVectorAdmin(OneTenantAdmin):
    list_display = ["id", "tenant", "memory_id", "embedder_key", "dimensions", "created_at"]
    list_filter = ["embedder_key"]
    exclude = ["embedding"]  # hundreds of floats: nothing a person reads


@admin.register(Tombstone)
class TombstoneAdmin(OneTenantAdmin):
    list_display = ["id", "tenant", "kind", "subject_digest", "digest", "request_id", "created_at"]
    list_filter = ["kind"]
    search_fields = ["subject_digest", "digest"]


@admin.register(HeldClaim)
class HeldClaimAdmin(OneTenantAdmin):
    """The poisoning review queue (decided in the console, by support or compliance)."""

    list_display = ["held_id", "tenant", "subject_id", "namespace", "key", "trust", "status", "created_at"]
    list_filter = ["status", "trust"]
    search_fields = ["held_id", "source"]


@admin.register(Procedure)
class ProcedureAdmin(OneTenantAdmin):
    """Procedural memory (confirmed, rejected or edited in the console, by support or engineers)."""

    list_display = ["procedure_id", "tenant", "workflow_name", "name", "status", "version", "invalidated_at"]
    list_filter = ["status", "workflow_name"]
    search_fields = ["procedure_id", "name"]


@admin.register(ProcedureSource)
class ProcedureSourceAdmin(OneTenantAdmin):
    list_display = [
        "source_id",
        "tenant",
        "procedure",
        "run_id",
        "request_seq",
        "reply_seq",
        "invalidated_at",
    ]
    search_fields = ["run_id"]
