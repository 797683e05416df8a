"""Documents, their chunks, who may read them, and the snapshots and invalidations that keep the
index honest. The index is a cache of the source system, with provenance: every chunk names its
document, source version and content digest, and is stale the moment its source changes.

Row-level security scopes every table to its tenant inside PostgreSQL (migration 0002); the ACL
predicate runs in the same SQL, so a chunk a principal may not read never reaches Python.
"""

from __future__ import annotations

import uuid

from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.db.models import Q
from pgvector.django import VectorField


class DocumentStatus(models.TextChoices):
    INDEXING = "indexing"  # the current version's chunks are waiting for their embeddings
    INDEXED = "indexed"


class Document(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey("core.Tenant", on_delete=models.PROTECT, db_column="tenant_id")
    # The source system's own id ("policy-42"); the chunk ids start with it.
    document_id = models.TextField()
    source_uri = models.TextField()
    source_version = models.TextField()  # the source's etag or version; immutable per content
    source_digest = models.TextField()  # sha256 of the source bytes of this version
    media_type = models.TextField()
    title = models.TextField(blank=True, default="")
    # Principals that may read it: "user:alice", "group:support". Empty = nobody.
    acl = ArrayField(models.TextField(), default=list)
    status = models.TextField(choices=DocumentStatus.choices, default=DocumentStatus.INDEXING)
    index_version = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    indexed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "retrieval_documents"
        constraints = [
            models.UniqueConstraint(fields=["tenant", "document_id"], name="retrieval_documents_unique"),
            models.CheckConstraint(
                condition=Q(status__in=[s.value for s in DocumentStatus]), name="retrieval_documents_status"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.document_id}@{self.source_version}"


class ChunkStatus(models.TextChoices):
    PENDING = "pending"  # text stored, embedding not yet computed: not searchable
    CURRENT = "current"
    STALE = "stale"  # kept for snapshot replay only; never returned by a search


class Chunk(models.Model):
    id = models.BigAutoField(primary_key=True)
    tenant = models.ForeignKey("core.Tenant", on_delete=models.PROTECT, db_column="tenant_id")
    document = models.ForeignKey(Document, on_delete=models.CASCADE, related_name="chunks")
    document_id_text = models.TextField(db_column="document_key")  # the source's id, for hits
    source_uri = models.TextField()
    source_version = models.TextField()
    chunk_id = models.TextField()  # "policy-42:p7:c2": document, page or section, ordinal
    section = models.TextField()
    ordinal = models.IntegerField()
    text = models.TextField()
    content_digest = models.TextField()
    index_version = models.TextField()
    # A copy of the document's ACL, changed in the same transaction as the document's: the filter
    # runs on the chunk row itself, next to the vector, in the same statement.
    acl = ArrayField(models.TextField(), default=list)
    status = models.TextField(choices=ChunkStatus.choices, default=ChunkStatus.PENDING)
    embedder_key = models.TextField(null=True, blank=True)
    dimensions = models.IntegerField(null=True, blank=True)
    embedding = VectorField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    indexed_at = models.DateTimeField(null=True, blank=True)
    stale_at = models.DateTimeField(null=True, blank=True)
    stale_reason = models.TextField(null=True, blank=True)

    class Meta:
        db_table = "retrieval_chunks"
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "document_id_text", "source_version", "chunk_id"],
                name="retrieval_chunks_unique",
            ),
            models.CheckConstraint(
                condition=Q(status__in=[s.value for s in ChunkStatus]), name="retrieval_chunks_status"
            ),
            models.CheckConstraint(
                condition=~Q(status=ChunkStatus.CURRENT) | Q(embedding__isnull=False),
                name="retrieval_chunks_current_has_embedding",
            ),
            models.CheckConstraint(
                condition=~Q(status=ChunkStatus.STALE) | Q(stale_reason__isnull=False),
                name="retrieval_chunks_stale_has_reason",
            ),
        ]
        indexes = [models.Index(fields=["document", "status"], name="retrieval_chunks_doc_status")]

    def __str__(self) -> str:
        return f"{self.chunk_id}@{self.source_version}"


class Principal(models.Model):
    """A user of a tenant and the groups it belongs to: the tenant's membership, as far as retrieval
    needs it. A search names a user principal; its groups are expanded inside the search's SQL, so
    a membership change counts on the very next search."""

    id = models.BigAutoField(primary_key=True)
    tenant = models.ForeignKey("core.Tenant", on_delete=models.PROTECT, db_column="tenant_id")
    principal = models.TextField()  # "user:alice"
    groups = ArrayField(models.TextField(), default=list)  # ["group:support"]
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "retrieval_principals"
        constraints = [
            models.UniqueConstraint(fields=["tenant", "principal"], name="retrieval_principals_unique")
        ]

    def __str__(self) -> str:
        return self.principal


class InvalidationKind(models.TextChoices):
    DOCUMENT_UPDATED = "document_updated"
    DOCUMENT_DELETED = "document_deleted"
    ACL_CHANGED = "acl_changed"
    MEMBERSHIP_CHANGED = "membership_changed"
    INDEX_VERSION_CHANGED = "index_version_changed"
    TTL_EXPIRED = "ttl_expired"


class Invalidation(models.Model):
    """An event that made index entries stale, written in the same transaction as the change."""

    id = models.BigAutoField(primary_key=True)
    tenant = models.ForeignKey("core.Tenant", on_delete=models.PROTECT, db_column="tenant_id")
    kind = models.TextField(choices=InvalidationKind.choices)
    document_id_text = models.TextField(db_column="document_key", null=True, blank=True)
    principal = models.TextField(null=True, blank=True)
    chunks_affected = models.IntegerField(default=0)
    details = models.JSONField(default=dict)
    actor = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "retrieval_invalidations"
        ordering = ["-id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(kind__in=[k.value for k in InvalidationKind]), name="retrieval_invalidations_kind"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.document_id_text or self.principal or ''}"


class DocumentTombstone(models.Model):
    """A deleted document and the versions it had, by digest: an old ingestion stream that carries
    one of them again is refused, so a deletion cannot be undone by a replay."""

    id = models.BigAutoField(primary_key=True)
    tenant = models.ForeignKey("core.Tenant", on_delete=models.PROTECT, db_column="tenant_id")
    document_id_text = models.TextField(db_column="document_key")
    version_digests = ArrayField(models.TextField(), default=list)
    actor = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "retrieval_tombstones"
        constraints = [
            models.UniqueConstraint(fields=["tenant", "document_id_text"], name="retrieval_tombstones_unique")
        ]

    def __str__(self) -> str:
        return f"tombstone {self.document_id_text}"


class RetrievalSnapshot(models.Model):
    """What one search returned, as chapter 33 lays it out: enough to reproduce a run's context
    from immutable source versions instead of searching again."""

    snapshot_id = models.TextField(primary_key=True)  # "rs_<32 hex>"
    tenant = models.ForeignKey("core.Tenant", on_delete=models.PROTECT, db_column="tenant_id")
    run_id = models.UUIDField(null=True, blank=True)  # by value: retrieval never imports runs
    query_digest = models.TextField()
    index_version = models.TextField()
    acl_principal = models.TextField()  # "tenant:<uuid>/user:alice"
    k = models.IntegerField()
    # [{document_id, source_uri, source_version, chunk_id, content_digest, retrieved_at, score}]
    hits = models.JSONField(default=list)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "retrieval_snapshots"
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["run_id", "query_digest"], name="retrieval_snapshots_run")]

    def __str__(self) -> str:
        return self.snapshot_id


class ChunkAcl(models.Model):
    """Each distinct ACL of a tenant's chunks, once, under a key: a posting names its chunk's ACL by
    key, so a search turns the principal's groups into the few keys it may read (a scan of this small
    table) and filters postings with `=` (a btree condition row-level security allows). `chunks`
    counts the tenant's current chunks with this ACL, kept by the chunk triggers in the same statement
    (migration 0004): a search reads how much a principal may read, and of how much, from these rows."""

    acl_key = models.UUIDField(primary_key=True)  # md5 of the tenant and the sorted ACL
    tenant = models.ForeignKey("core.Tenant", on_delete=models.PROTECT, db_column="tenant_id")
    acl = ArrayField(models.TextField(), default=list)
    chunks = models.IntegerField(db_default=0)

    class Meta:
        db_table = "retrieval_acls"

    def __str__(self) -> str:
        return ",".join(self.acl)


class ChunkPosting(models.Model):
    """One word of a current chunk, with its impact (ts_rank of the chunk for that word alone), its
    ACL's key and indexed_at: the full-text arm's postings, read by a btree range scan per word.

    Written by triggers on retrieval_chunks in the same statement as the chunk (migration 0003), only
    while the chunk is current, and gone with it (ON DELETE CASCADE). Row-level security like its parent.
    """

    pk = models.CompositePrimaryKey("chunk_id", "term")
    # DO_NOTHING: the database's ON DELETE CASCADE removes them (one statement, whoever deletes).
    chunk = models.ForeignKey(Chunk, on_delete=models.DO_NOTHING, db_column="chunk", db_index=False)
    term = models.TextField()
    tenant = models.ForeignKey("core.Tenant", on_delete=models.PROTECT, db_column="tenant_id", db_index=False)
    impact = models.FloatField()
    acl_key = models.UUIDField()
    indexed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "retrieval_postings"

    def __str__(self) -> str:
        return f"{self.term} in {self.chunk_id}"


class ChunkTerm(models.Model):
    """How many of the tenant's current chunks with one ACL hold a word, kept by triggers on
    retrieval_chunks in the same statement as the chunks (migration 0006): the text arm weighs a word
    by how rare it is among the chunks its principal may read (BM25's idf, the counts of the
    principal's ACL keys summed), so a rare word counts for more than a common one, the common words'
    postings can mostly stay unread, and no weight reflects a document the principal cannot see. A
    word no current chunk of that ACL holds has no row."""

    pk = models.CompositePrimaryKey("tenant_id", "term", "acl_key")
    tenant = models.ForeignKey("core.Tenant", on_delete=models.PROTECT, db_column="tenant_id", db_index=False)
    term = models.TextField()
    acl_key = models.UUIDField()
    chunks = models.IntegerField()

    class Meta:
        db_table = "retrieval_terms"

    def __str__(self) -> str:
        return f"{self.term} ({self.chunks})"
