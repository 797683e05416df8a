"""Long-term memory: narrow, checkable claims with provenance, scope, TTL and invalidation.

The table follows chapter 33. A new value never overwrites an old one: it supersedes it (the old row
is invalidated with reason "superseded", its value untouched). Row-level security scopes every row
to its tenant inside PostgreSQL (migration 0002): with no tenant set, nothing is visible.
"""

from __future__ import annotations

import uuid

from django.db import models
from django.db.models import Q
from pgvector.django import VectorField

PROVENANCE_KEYS = ["source_type", "source_id", "source_version", "run_id", "event_seq", "validation_method"]


class MemoryItem(models.Model):
    memory_id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey("core.Tenant", on_delete=models.PROTECT, db_column="tenant_id")
    # Whom the claim is about, as the tenant's systems name them (a customer id, a user id).
    subject_id = models.TextField()
    namespace = models.TextField()
    key = models.TextField()
    value = models.JSONField()
    schema_version = models.IntegerField(default=1)
    # {source_type, source_id, source_version, run_id, event_seq, validation_method}
    provenance = models.JSONField()
    confidence = models.FloatField(null=True, blank=True)
    valid_from = models.DateTimeField()
    expires_at = models.DateTimeField(null=True, blank=True)
    invalidated_at = models.DateTimeField(null=True, blank=True)
    invalidation_reason = models.TextField(null=True, blank=True)
    supersedes = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        db_column="supersedes",
        related_name="superseded_by",
    )
    consent_basis = models.TextField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "memory_items"
        ordering = ["-valid_from"]
        constraints = [
            models.CheckConstraint(
                condition=Q(confidence__isnull=True) | (Q(confidence__gte=0) & Q(confidence__lte=1)),
                name="memory_items_confidence_0_1",
            ),
            models.CheckConstraint(
                condition=Q(provenance__has_keys=PROVENANCE_KEYS), name="memory_items_provenance"
            ),
            models.CheckConstraint(
                condition=Q(invalidated_at__isnull=True) | Q(invalidation_reason__isnull=False),
                name="memory_items_invalidated_has_reason",
            ),
            # One current claim per (tenant, subject, namespace, key): a new one supersedes it.
            models.UniqueConstraint(
                fields=["tenant", "subject_id", "namespace", "key"],
                condition=Q(invalidated_at__isnull=True),
                name="memory_items_one_current",
            ),
        ]
        indexes = [models.Index(fields=["tenant", "subject_id", "namespace"], name="memory_items_scope_idx")]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.key} of {self.subject_id}"


class MemoryVector(models.Model):
    """The vector projection of a memory item under one embedder: derived, rebuilt, never the truth.

    Vectors of different embedders (name, version, dimensions) never mix: searches read only the
    current embedder's key, and re-projection replaces the others.
    """

    id = models.BigAutoField(primary_key=True)
    tenant = models.ForeignKey("core.Tenant", on_delete=models.PROTECT, db_column="tenant_id")
    memory = models.ForeignKey(
        MemoryItem, on_delete=models.CASCADE, db_column="memory_id", related_name="vectors"
    )
    embedder_key = models.TextField()
    dimensions = models.IntegerField()
    embedding = VectorField()
    content_digest = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "memory_vectors"
        constraints = [
            models.UniqueConstraint(
                fields=["memory", "embedder_key"], name="memory_vectors_one_per_embedder"
            ),
            models.CheckConstraint(condition=Q(dimensions__gt=0), name="memory_vectors_dimensions_positive"),
        ]

    def __str__(self) -> str:
        return f"vector of {self.memory_id} ({self.embedder_key})"


class Tombstone(models.Model):
    """What was erased, by digest only: a replayed event stream or a re-run extraction that would
    bring back the same claim (or read the same source event) is refused."""

    id = models.BigAutoField(primary_key=True)
    tenant = models.ForeignKey("core.Tenant", on_delete=models.PROTECT, db_column="tenant_id")
    subject_digest = models.TextField()
    kind = models.TextField()  # "claim" (subject+namespace+key+value) or "source" (run id + event seq)
    digest = models.TextField()
    # The erasure request that laid it (the erasure app's; erasure/models.py).
    request = models.ForeignKey("erasure.ErasureRequest", on_delete=models.PROTECT, db_column="request_id")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "memory_tombstones"
        constraints = [
            models.UniqueConstraint(fields=["tenant", "kind", "digest"], name="memory_tombstones_unique"),
            models.CheckConstraint(condition=Q(kind__in=["claim", "source"]), name="memory_tombstones_kind"),
        ]

    def __str__(self) -> str:
        return f"tombstone {self.kind} {self.digest}"


class MemoryPosting(models.Model):
    """One word of a current claim, with its impact (ts_rank of the claim for that word alone): the
    full-text arm's postings, read by a btree range scan per word, highest impact first.

    Written by triggers on memory_items in the same statement as the claim (migration 0007), only
    for current claims, and gone with the claim (ON DELETE CASCADE). Row-level security like its parent.
    """

    pk = models.CompositePrimaryKey("memory_id", "term")
    # DO_NOTHING here: the database's own ON DELETE CASCADE (migration 0007) removes the postings, so
    # a claim's delete (and its count) is one statement, whoever deletes it.
    memory = models.ForeignKey(
        MemoryItem,
        on_delete=models.DO_NOTHING,
        db_column="memory_id",
        related_name="postings",
        db_index=False,
    )
    term = models.TextField()
    tenant = models.ForeignKey("core.Tenant", on_delete=models.PROTECT, db_column="tenant_id", db_index=False)
    impact = models.FloatField()
    # Copies of the claim's, so the filters run on the posting itself, before the top-k.
    subject_id = models.TextField()
    expires_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "memory_postings"

    def __str__(self) -> str:
        return f"{self.term} in {self.memory_id}"


from memory.poisoning.models import HeldClaim  # noqa: E402,F401 - the review queue's table (memory 0008)
from memory.procedures.models import Procedure, ProcedureSource  # noqa: E402,F401 - procedural memory (memory 0014)
