"""Retrieval in the erasure registry: the knowledge base is scanned for the subject; what names them
as a principal, a searcher or in a deleted document's records is deleted or keyed.

A retrieval snapshot keeps the query as its digest only (never its text) and its hits as document
references, so no snapshot holds what a subject said; documents are the company's own texts and are
searched for the subject's id and distinctive texts (a match shows on the receipt with what to do:
the document is deleted or corrected through the documents API, with its own tombstone). A customer
can be a principal of their own (user:cust-7781, searching a self-service portal) and a document can
be named after them (ticket-cust-7781): RetrievalEraser removes the subject as a principal with the
snapshots of their searches and of searches that returned such a document, keys such a document's id
in the tombstones (which still refuse its deleted versions) and in the invalidations, and keys who
changed the index where that names them.
"""

from __future__ import annotations

from uuid import UUID

from django.db import connection

from core.digests import erased_id
from core.tenancy import tenant_scope
from erasure.matching import Scope, subject_condition
from erasure.places import Place, column_place
from erasure.registry import Eraser, Free, free
from retrieval.services import tombstone_key

KNOWLEDGE_BASE = (
    "{}: the knowledge base (documents the company wrote), searched for the subject's id and their "
    "distinctive texts (an e-mail address, a long or numbered text)"
)
DOCUMENT_REMEDY = (
    "a document names the subject (in its text, its id, its source or its ACL): delete it, or index it "
    "again without them, through the documents API (/api/v1/retrieval/documents/), then retry"
)


class RetrievalEraser(Eraser):
    name = "retrieval"

    def erase(self, *, scope: Scope, request_id: UUID, subject_digest: str) -> dict[str, int]:
        subject, tenant = scope.subject_id, scope.tenant_id
        counts: dict[str, int] = {}
        with tenant_scope(tenant), connection.cursor() as cursor:
            principal, p = subject_condition("principal", subject, values=scope.values)
            cursor.execute(
                f"DELETE FROM retrieval_principals WHERE tenant_id = %s AND {principal}", [tenant, *p]
            )  # noqa: S608
            counts["retrieval_principals"] = cursor.rowcount
            searcher, s = subject_condition("acl_principal", subject, values=scope.values)
            hits, h = subject_condition("hits", subject, json=True, values=scope.values)
            cursor.execute(
                f"DELETE FROM retrieval_snapshots WHERE tenant_id = %s AND ({searcher} OR {hits})",  # noqa: S608
                [tenant, *s, *h],
            )
            counts["retrieval_snapshots"] = cursor.rowcount
            key, k = subject_condition("document_key", subject, values=scope.values)
            cursor.execute(
                f"SELECT id, document_key FROM retrieval_tombstones WHERE tenant_id = %s AND {key}",  # noqa: S608
                [tenant, *k],
            )
            tombstones = cursor.fetchall()
            for row_id, document_id in tombstones:
                cursor.execute(
                    "UPDATE retrieval_tombstones SET document_key = %s, actor = '' WHERE id = %s",
                    [tombstone_key(tenant_id=tenant, document_id=document_id), row_id],
                )
            counts["retrieval_tombstones"] = len(tombstones)
            # Who deleted a document or changed the index, where that names the subject: keyed.
            counts["retrieval_actors_keyed"] = 0
            for table in ("retrieval_tombstones", "retrieval_invalidations"):
                actor, a = subject_condition("actor", subject, values=scope.values)
                cursor.execute(
                    f"SELECT id, actor FROM {table} WHERE tenant_id = %s AND {actor}",  # noqa: S608
                    [tenant, *a],
                )
                for row_id, name in cursor.fetchall():
                    cursor.execute(
                        f"UPDATE {table} SET actor = %s WHERE id = %s",  # noqa: S608
                        [erased_id(name), row_id],
                    )
                    counts["retrieval_actors_keyed"] += 1
            who, w = subject_condition("principal", subject, values=scope.values)
            details, d = subject_condition("details", subject, json=True, values=scope.values)
            cursor.execute(
                f"SELECT id, document_key FROM retrieval_invalidations"  # noqa: S608
                f" WHERE tenant_id = %s AND ({key} OR {who} OR {details})",
                [tenant, *k, *w, *d],
            )
            invalidations = cursor.fetchall()
            for row_id, document_id in invalidations:
                cursor.execute(
                    "UPDATE retrieval_invalidations SET document_key = %s, principal = NULL, details = '{}'"
                    " WHERE id = %s",
                    [
                        tombstone_key(tenant_id=tenant, document_id=document_id) if document_id else None,
                        row_id,
                    ],
                )
            counts["retrieval_invalidations"] = len(invalidations)
            # An ACL that named the subject and no current chunk has any more (its documents deleted or
            # given another ACL): the chunk triggers keep its count, nothing else deletes it. Named by
            # their id or one of their distinctive texts (user:their@e-mail), as the scan finds it.
            acl, a = subject_condition("array_to_string(acl, ' ')", subject, values=scope.values)
            cursor.execute(
                f"DELETE FROM retrieval_acls WHERE tenant_id = %s AND chunks = 0 AND {acl}",  # noqa: S608
                [tenant, *a],
            )
            counts["retrieval_acls"] = cursor.rowcount
        return counts

    def places(self) -> list[Place]:
        found: list[Place] = []
        # The postings hold the words of the chunks' texts, and retrieval_terms each word once with its
        # count: searched like the texts (a word leaves with the last chunk that holds it). A document can
        # also be named after a customer (ticket-cust-7781) or readable by them by name (user:cust-7781 in
        # its ACL): its ids and ACL are searched too. Only the company changes its documents.
        for table, column, kind in (
            ("retrieval_chunks", "text", "text"),
            ("retrieval_chunks", "section", "text"),
            ("retrieval_chunks", "document_key", "text"),
            ("retrieval_chunks", "source_uri", "text"),
            ("retrieval_chunks", "chunk_id", "text"),
            ("retrieval_chunks", "acl", "array"),
            ("retrieval_documents", "title", "text"),
            ("retrieval_documents", "document_id", "text"),
            ("retrieval_documents", "source_uri", "text"),
            ("retrieval_documents", "acl", "array"),
            ("retrieval_postings", "term", "text"),
            ("retrieval_terms", "term", "text"),
        ):
            found.append(
                column_place(
                    table=table,
                    column=column,
                    kind=kind,
                    tenant_sql="t.tenant_id = %(tenant)s",
                    erased_by="",
                    what=KNOWLEDGE_BASE.format(f"{table}.{column}"),
                    remedy=DOCUMENT_REMEDY,
                )
            )
        # What the eraser deletes or keys: the subject as a principal, the snapshots of their searches and
        # of searches that returned a document named after them, an unused ACL that names them, and a
        # deleted document's id and who changed the index, where those name them.
        for table, column, kind, what, remedy in (
            ("retrieval_principals", "principal", "text", "the subject as a principal (deleted)", ""),
            ("retrieval_snapshots", "acl_principal", "text", "who searched (the snapshot is deleted)", ""),
            ("retrieval_snapshots", "hits", "json", "the documents a search returned (deleted)", ""),
            (
                "retrieval_acls",
                "acl",
                "array",
                "an ACL naming the subject (deleted once no chunk uses it)",
                DOCUMENT_REMEDY,
            ),
            ("retrieval_tombstones", "document_key", "text", "a deleted document's id (keyed)", ""),
            ("retrieval_tombstones", "actor", "text", "who deleted the document (keyed)", ""),
            ("retrieval_invalidations", "document_key", "text", "the changed document (keyed)", ""),
            ("retrieval_invalidations", "principal", "text", "the principal that changed (cleared)", ""),
            ("retrieval_invalidations", "details", "json", "what changed (cleared)", ""),
            ("retrieval_invalidations", "actor", "text", "who changed the index (keyed)", ""),
        ):
            found.append(
                column_place(
                    table=table,
                    column=column,
                    kind=kind,
                    tenant_sql="t.tenant_id = %(tenant)s",
                    erased_by=self.name,
                    what=f"{table}.{column}: {what}",
                    remedy=remedy,
                )
            )
        return found

    def free(self) -> list[Free]:
        refs = "document versions, digests, index versions, statuses and ACL groups"
        return [
            free(
                "retrieval_documents",
                refs,
                "source_version",
                "source_digest",
                "media_type",
                "status",
                "index_version",
            ),
            free(
                "retrieval_chunks",
                refs,
                "source_version",
                "content_digest",
                "index_version",
                "status",
                "embedder_key",
                "stale_reason",
            ),
            free(
                "retrieval_snapshots",
                "the query's digest (never its text) and the index version",
                "snapshot_id",
                "query_digest",
                "index_version",
            ),
            free("retrieval_principals", "the groups a principal belongs to", "groups"),
            free("retrieval_invalidations", "what kind of change (a code)", "kind"),
            free("retrieval_tombstones", "digests of the deleted versions", "version_digests"),
        ]
