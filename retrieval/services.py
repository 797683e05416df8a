"""Writing the retrieval index: documents, their ACLs, the tenant's principals, and invalidation.

Every change that makes index entries wrong (a new source version, a deletion, an ACL or
membership change, an embedder change, age) writes an invalidation event in the same transaction
that makes the entries unreadable: stale chunks are never served, and a task embeds the new
version's chunks (`document_embed`). Deleted documents leave a tombstone with their versions'
digests, so an old ingestion stream cannot index them again.

Over 400 lines on purpose: every write that can make an index entry stale is here, beside the
invalidation it must write in the same transaction.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from core.crash import crash_point
from core.digests import keyed_digest, sha256_digest
from core.errors import Conflict, InvalidInput, NotFound
from core.models import Tenant
from core.tasks import task_send
from core.tenancy import tenant_scope
from memory.embedders import Embedder, embedder_from_settings
from retrieval.chunking import CHUNKER_VERSION, chunk_sections
from retrieval.indexes import chunk_index_wanted
from retrieval.models import (
    Chunk,
    ChunkStatus,
    Document,
    DocumentStatus,
    DocumentTombstone,
    Invalidation,
    InvalidationKind,
    Principal,
)
from retrieval.readable import UnknownPrincipal
from retrieval.sources import source_sections


def tombstone_key(*, tenant_id: Any, document_id: str) -> str:
    """What stands in for a document id that named an erased subject, in its tombstone: the deleted
    versions stay refused without the id being readable."""
    return keyed_digest(["retrieval-document", str(tenant_id), document_id])


logger = logging.getLogger(__name__)
PRINCIPAL = re.compile(r"^(user|group):[\w.@+\-]{1,200}$")
USER = re.compile(r"^user:[\w.@+\-]{1,200}$")
EMBED_BATCH = 256


class DocumentDeleted(Conflict):
    code = "document_deleted"


class SourceVersionConflict(Conflict):
    code = "source_version_conflict"


def index_version(embedder: Embedder) -> str:
    """Names one generation of the index: the chunking rules and the embedder (name, version, size)."""
    return f"{CHUNKER_VERSION}/{embedder.key}"


def _principals(values: Any, *, field: str, pattern: re.Pattern[str] = PRINCIPAL) -> list[str]:
    if not isinstance(values, list | tuple) or len(values) > 1000:
        raise InvalidInput(f"{field} must be a list of at most 1000 principals", code="invalid_principal")
    bad = [v for v in values if not isinstance(v, str) or not pattern.match(v)]
    if bad:
        raise InvalidInput(
            f"{field}: {str(bad[0])[:80]!r} is not a principal; use user:<name> or group:<name>",
            code="invalid_principal",
            details={"field": field},
        )
    return sorted(set(values))


def _text(value: Any, *, field: str, limit: int) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > limit or "\x00" in value:
        raise InvalidInput(f"{field} must be 1 to {limit} characters", code="invalid_document_field")
    return value


# --- principals (the tenant's membership) ----------------------------------------------------


def principal_set(*, tenant: Tenant, principal: str, groups: list[str], actor: str) -> Principal:
    """Create a user principal or replace its groups. Losing a group is a membership change: it is
    recorded as an invalidation and counts on the very next search (groups expand inside the SQL)."""
    [principal] = _principals([principal], field="principal", pattern=USER)
    groups = _principals(groups, field="groups", pattern=re.compile(r"^group:[\w.@+\-]{1,200}$"))
    with tenant_scope(tenant.tenant_id):
        row = Principal.objects.select_for_update().filter(tenant=tenant, principal=principal).first()
        removed = sorted(set(row.groups) - set(groups)) if row else []
        if row is None:
            row = Principal.objects.create(tenant=tenant, principal=principal, groups=groups)
        elif row.groups != groups:
            row.groups = groups
            row.save(update_fields=["groups", "updated_at"])
        if removed:
            Invalidation.objects.create(
                tenant=tenant,
                kind=InvalidationKind.MEMBERSHIP_CHANGED,
                principal=principal,
                details={"groups_removed": removed},
                actor=actor,
            )
    return row


def principal_remove(*, tenant: Tenant, principal: str, actor: str) -> None:
    """Take a user out of the tenant: its next search is refused as an unknown principal."""
    with tenant_scope(tenant.tenant_id):
        deleted, _ = Principal.objects.filter(tenant=tenant, principal=principal).delete()
        if not deleted:
            raise UnknownPrincipal(f"no principal {principal[:80]!r} in this tenant")
        Invalidation.objects.create(
            tenant=tenant,
            kind=InvalidationKind.MEMBERSHIP_CHANGED,
            principal=principal,
            details={"removed_from_tenant": True},
            actor=actor,
        )


# --- documents ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class IndexResult:
    document: Document
    changed: bool
    chunks: int
    invalidated: int


def document_index(
    *,
    tenant: Tenant,
    document_id: str,
    source_uri: str,
    source_version: str,
    data: bytes,
    media_type: str,
    acl: list[str],
    actor: str,
    title: str = "",
    embedder: Embedder | None = None,
    wait: bool = False,
) -> IndexResult:
    """Index one version of a document. Idempotent per (document, source_version): the same version
    with the same bytes changes nothing. A new version makes the old chunks stale at once; an older
    version than the current one, or the same version with other bytes, is refused; so is any version
    of a deleted document that was already seen. Nothing is half-indexed: the source is parsed and
    chunked before the transaction, and the chunks are written in it.

    The new chunks wait for their embeddings (a task, or at once with wait=True)."""
    embedder = embedder or embedder_from_settings()
    source_uri = _text(source_uri, field="source_uri", limit=2000)
    source_version = _text(source_version, field="source_version", limit=200)
    title = title if isinstance(title, str) else ""
    acl = _principals(acl, field="acl")
    if not isinstance(data, bytes):
        raise InvalidInput("the document's content must be bytes", code="invalid_document_field")
    sections = source_sections(
        data=data, media_type=media_type, max_bytes=settings.KEEPER_RETRIEVAL_MAX_BYTES
    )
    pieces = chunk_sections(
        document_id=document_id,
        sections=sections,
        max_words=settings.KEEPER_RETRIEVAL_CHUNK_WORDS,
        max_chunks=settings.KEEPER_RETRIEVAL_MAX_CHUNKS,
    )
    source_digest, version_digest = sha256_digest(data), sha256_digest(source_version)
    generation = index_version(embedder)
    with tenant_scope(tenant.tenant_id):
        with connection.cursor() as cursor:
            # Two ingestions of one document take turns (a new document has no row to lock yet);
            # the second then sees the first's version and is a no-op or a clear conflict.
            cursor.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
                [f"retrieval/{tenant.tenant_id}/{document_id}"],
            )
        # A tombstone names the document, or (the document named an erased subject) its keyed digest.
        keys = [document_id, tombstone_key(tenant_id=tenant.tenant_id, document_id=document_id)]
        tombstone = DocumentTombstone.objects.filter(tenant=tenant, document_id_text__in=keys).first()
        if tombstone and version_digest in tombstone.version_digests:
            raise DocumentDeleted(
                f"document {document_id!r} version {source_version!r} was deleted; an old "
                "ingestion cannot bring it back",
                details={"document_id": document_id},
            )
        document = Document.objects.select_for_update().filter(tenant=tenant, document_id=document_id).first()
        if document is not None:
            known = Chunk.objects.filter(tenant=tenant, document=document, source_version=source_version)
            if document.source_version == source_version:
                if document.source_digest != source_digest:
                    raise SourceVersionConflict(
                        f"version {source_version!r} of {document_id!r} was indexed with other content; "
                        "a source version must name one content (give the new content a new version)"
                    )
                if known.exclude(status=ChunkStatus.STALE).exists():
                    if sorted(document.acl) != acl:
                        _acl_apply(document, acl, actor)
                    return IndexResult(document, changed=False, chunks=known.count(), invalidated=0)
                known.delete()  # this version's entries aged out (TTL): index it again
            elif known.exists():
                raise SourceVersionConflict(
                    f"version {source_version!r} of {document_id!r} was replaced by "
                    f"{document.source_version!r}; an older version cannot replace a newer one"
                )
        now = timezone.now()
        invalidated = 0
        if document is None:
            document = Document(tenant=tenant, document_id=document_id)
        else:
            invalidated = _stale(
                Chunk.objects.filter(tenant=tenant, document=document).exclude(status=ChunkStatus.STALE),
                reason=InvalidationKind.DOCUMENT_UPDATED,
                now=now,
            )
            Invalidation.objects.create(
                tenant=tenant,
                kind=InvalidationKind.DOCUMENT_UPDATED,
                document_id_text=document_id,
                chunks_affected=invalidated,
                actor=actor,
                details={"from_version": document.source_version, "to_version": source_version},
            )
        document.source_uri, document.source_version, document.source_digest = (
            source_uri,
            source_version,
            source_digest,
        )
        document.media_type, document.title, document.acl = media_type, title[:500], acl
        document.status, document.index_version, document.indexed_at = (
            DocumentStatus.INDEXING,
            generation,
            None,
        )
        document.save()
        Chunk.objects.bulk_create(
            [
                Chunk(
                    tenant=tenant,
                    document=document,
                    document_id_text=document_id,
                    source_uri=source_uri,
                    source_version=source_version,
                    chunk_id=p.chunk_id,
                    section=p.section,
                    ordinal=p.ordinal,
                    text=p.text,
                    content_digest=p.content_digest,
                    index_version=generation,
                    acl=acl,
                )
                for p in pieces
            ]
        )
        if not wait:
            transaction.on_commit(
                lambda: task_send(
                    name="workers.tasks.embed_document", args=[str(tenant.tenant_id), str(document.id)]
                )
            )
    if wait:
        document_embed(tenant=tenant, document_pk=document.id, embedder=embedder)
        with tenant_scope(tenant.tenant_id):
            document.refresh_from_db(from_queryset=Document.objects.filter(tenant=tenant))
    return IndexResult(document, changed=True, chunks=len(pieces), invalidated=invalidated)


def _stale(chunks: Any, *, reason: str, now: Any) -> int:
    # The embedding goes with the entry: a stale chunk stays only for snapshot replay, by its text.
    return chunks.update(status=ChunkStatus.STALE, stale_at=now, stale_reason=reason, embedding=None)


def document_embed(*, tenant: Tenant, document_pk: Any, embedder: Embedder | None = None) -> int:
    """Embed the document's pending chunks and make them current; the document is indexed when none
    is left. Safe to run twice or concurrently with a new version: only pending chunks of the
    current version turn current, so a chunk that went stale meanwhile stays stale."""
    embedder = embedder or embedder_from_settings()
    generation, done = index_version(embedder), 0
    while True:
        with tenant_scope(tenant.tenant_id):
            document = Document.objects.filter(tenant=tenant, id=document_pk).first()
            if document is None:
                return done  # deleted meanwhile
            batch = list(
                Chunk.objects.filter(
                    tenant=tenant,
                    document=document,
                    status=ChunkStatus.PENDING,
                    source_version=document.source_version,
                )
                .order_by("id")
                .values_list("id", "text")[:EMBED_BATCH]
            )
            if not batch:
                updated = Document.objects.filter(
                    tenant=tenant, id=document_pk, status=DocumentStatus.INDEXING
                ).update(status=DocumentStatus.INDEXED, indexed_at=timezone.now(), index_version=generation)
                if updated:
                    # By its row's key: a document's id may name a person ("transcript-王芳").
                    logger.info("document #%s indexed (%s chunks embedded)", document_pk, done)
        if not batch:
            if done and chunk_index_wanted(tenant, embedder.dimensions):
                task_send(
                    name="workers.tasks.index_tenant_chunks",
                    args=[str(tenant.tenant_id), str(embedder.dimensions)],
                )
            return done
        vectors = embedder.embed([text for _, text in batch])  # outside any transaction: it may be slow
        with tenant_scope(tenant.tenant_id), connection.cursor() as cursor:
            # One statement a batch; only rows still pending turn current (a stale one stays stale).
            cursor.execute(
                """UPDATE retrieval_chunks c
                      SET status = 'current', embedding = v.embedding::vector, embedder_key = %s, dimensions = %s,
                          index_version = %s, indexed_at = now()
                     FROM unnest(%s::bigint[], %s::text[]) AS v(id, embedding)
                    WHERE c.tenant_id = %s AND c.id = v.id AND c.status = 'pending'""",
                [
                    embedder.key,
                    embedder.dimensions,
                    generation,
                    [pk for pk, _ in batch],
                    [str(vector) for vector in vectors],
                    tenant.tenant_id,
                ],
            )
            done += cursor.rowcount
        crash_point("after_embed_batch", key=str(document_pk))


def documents_pending(*, tenant: Tenant) -> list[Any]:
    """Documents whose current version still has chunks waiting for embeddings."""
    with tenant_scope(tenant.tenant_id):
        return list(
            Document.objects.filter(tenant=tenant, status=DocumentStatus.INDEXING)
            .order_by("updated_at")
            .values_list("id", flat=True)
        )


def _acl_apply(document: Document, acl: list[str], actor: str) -> int:
    before = set(document.acl)
    document.acl = acl
    document.save(update_fields=["acl", "updated_at"])
    affected = Chunk.objects.filter(tenant_id=document.tenant_id, document=document).update(acl=acl)
    Invalidation.objects.create(
        tenant_id=document.tenant_id,
        kind=InvalidationKind.ACL_CHANGED,
        document_id_text=document.document_id,
        chunks_affected=affected,
        actor=actor,
        details={"added": sorted(set(acl) - before), "removed": sorted(before - set(acl))},
    )
    return affected


def document_acl_set(*, tenant: Tenant, document_id: str, acl: list[str], actor: str) -> Document:
    """Replace who may read the document. Its chunks carry the new ACL in the same transaction, so
    the very next search filters by it; no waiting for a re-index or a TTL."""
    acl = _principals(acl, field="acl")
    with tenant_scope(tenant.tenant_id):
        document = _document(tenant, document_id, lock=True)
        if sorted(document.acl) != acl:
            _acl_apply(document, acl, actor)
    return document


def document_delete(*, tenant: Tenant, document_id: str, actor: str) -> int:
    """Delete the document and every chunk of every version (snapshots keep only ids and digests),
    and leave a tombstone of its versions. Returns the chunks deleted."""
    with tenant_scope(tenant.tenant_id):
        document = _document(tenant, document_id, lock=True)
        versions = set(
            Chunk.objects.filter(tenant=tenant, document=document).values_list("source_version", flat=True)
        )
        versions.add(document.source_version)
        digests = {sha256_digest(v) for v in versions}
        keys = [document_id, tombstone_key(tenant_id=tenant.tenant_id, document_id=document_id)]
        tombstone = DocumentTombstone.objects.filter(tenant=tenant, document_id_text__in=keys).first()
        if tombstone:
            tombstone.version_digests = sorted(set(tombstone.version_digests) | digests)
            tombstone.save(update_fields=["version_digests"])
        else:
            DocumentTombstone.objects.create(
                tenant=tenant, document_id_text=document_id, version_digests=sorted(digests), actor=actor
            )
        deleted, _ = Chunk.objects.filter(tenant=tenant, document=document).delete()
        document.delete()
        Invalidation.objects.create(
            tenant=tenant,
            kind=InvalidationKind.DOCUMENT_DELETED,
            document_id_text=document_id,
            chunks_affected=deleted,
            actor=actor,
            details={"versions": len(versions)},
        )
    return deleted


def _document(tenant: Tenant, document_id: str, *, lock: bool = False) -> Document:
    documents = Document.objects.select_for_update() if lock else Document.objects
    document = (
        documents.filter(tenant=tenant, document_id=document_id).first()
        if isinstance(document_id, str)
        else None
    )
    if document is None:
        raise NotFound(f"no document {str(document_id)[:80]!r} in this tenant", code="document_not_found")
    return document


# --- generations and age -----------------------------------------------------------------------


def index_reembed(*, tenant: Tenant, embedder: Embedder | None = None, actor: str = "system") -> int:
    """After an embedder change: chunks of another index version go back to pending (not served)
    and are embedded again under the current one. Returns the chunks re-queued."""
    embedder = embedder or embedder_from_settings()
    generation = index_version(embedder)
    with tenant_scope(tenant.tenant_id):
        old = Chunk.objects.filter(
            tenant=tenant, status__in=[ChunkStatus.CURRENT, ChunkStatus.PENDING]
        ).exclude(index_version=generation)
        documents = list(old.values_list("document_id", flat=True).distinct())
        requeued = old.update(
            status=ChunkStatus.PENDING,
            embedding=None,
            embedder_key=None,
            dimensions=None,
            index_version=generation,
            indexed_at=None,
        )
        Document.objects.filter(tenant=tenant, id__in=documents).update(status=DocumentStatus.INDEXING)
        if requeued:
            Invalidation.objects.create(
                tenant=tenant,
                kind=InvalidationKind.INDEX_VERSION_CHANGED,
                chunks_affected=requeued,
                actor=actor,
                details={"index_version": generation},
            )
    for document_pk in documents:
        document_embed(tenant=tenant, document_pk=document_pk, embedder=embedder)
    return requeued


def index_expire(*, tenant: Tenant, now: Any = None, actor: str = "beat") -> int:
    """Mark chunks older than the TTL stale (searches already skip them by age); their documents
    wait for the source system to send the version again. Returns the chunks marked."""
    days = settings.KEEPER_RETRIEVAL_TTL_DAYS
    if not days:
        return 0
    now = now or timezone.now()
    with tenant_scope(tenant.tenant_id):
        expired = Chunk.objects.filter(
            tenant=tenant, status=ChunkStatus.CURRENT, indexed_at__lt=now - timedelta(days=days)
        )
        per_document = list(expired.values_list("document_id_text").distinct())
        marked = _stale(expired, reason=InvalidationKind.TTL_EXPIRED, now=now)
        for (document_id,) in per_document:
            Invalidation.objects.create(
                tenant=tenant,
                kind=InvalidationKind.TTL_EXPIRED,
                document_id_text=document_id,
                actor=actor,
                details={"ttl_days": days},
            )
    return marked


def ttl_cutoff(now: Any = None) -> Any:
    days = settings.KEEPER_RETRIEVAL_TTL_DAYS
    return (now or timezone.now()) - timedelta(days=days) if days else None
