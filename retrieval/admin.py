"""Django admin for retrieval: documents, chunks, principals, invalidations, tombstones and
snapshots, read-only (ingestion and invalidation go through the services; snapshots are evidence)."""

from __future__ import annotations

from django.contrib import admin

from core.admin import OneTenantAdmin
from retrieval.models import (
    Chunk,
    ChunkAcl,
    Document,
    DocumentTombstone,
    Invalidation,
    Principal,
    RetrievalSnapshot,
)


@admin.register(Document)
class DocumentAdmin(OneTenantAdmin):
    list_display = [
        "document_id",
        "tenant",
        "title",
        "source_version",
        "status",
        "index_version",
        "indexed_at",
    ]
    list_filter = ["status", "tenant"]
    search_fields = ["document_id", "title", "source_uri"]


@admin.register(Chunk)
class ChunkAdmin(OneTenantAdmin):
    list_display = ["chunk_id", "tenant", "document_id_text", "section", "ordinal", "status", "stale_at"]
    list_filter = ["status"]
    search_fields = ["chunk_id", "document_id_text"]
    exclude = ["embedding"]
    show_full_result_count = False


@admin.register(Principal)
class PrincipalAdmin(OneTenantAdmin):
    list_display = ["principal", "tenant", "updated_at"]
    search_fields = ["principal"]


@admin.register(Invalidation)
class InvalidationAdmin(OneTenantAdmin):
    list_display = [
        "id",
        "tenant",
        "kind",
        "document_id_text",
        "principal",
        "chunks_affected",
        "actor",
        "created_at",
    ]
    list_filter = ["kind"]


@admin.register(DocumentTombstone)
class DocumentTombstoneAdmin(OneTenantAdmin):
    list_display = ["document_id_text", "tenant", "actor", "created_at"]
    search_fields = ["document_id_text"]


@admin.register(RetrievalSnapshot)
class RetrievalSnapshotAdmin(OneTenantAdmin):
    list_display = ["snapshot_id", "tenant", "run_id", "index_version", "acl_principal", "k", "created_at"]
    search_fields = ["snapshot_id", "run_id"]


@admin.register(ChunkAcl)
class ChunkAclAdmin(OneTenantAdmin):
    """Each distinct ACL of a tenant's chunks once, by key: what a search's ACL keys stand for."""

    list_display = ["acl_key", "tenant", "acl"]
    list_filter = ["tenant"]
