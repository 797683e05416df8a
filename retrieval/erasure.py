"""Retrieval's part of the erasure registry: the knowledge base is scanned for the subject's id; the rest is free.

A retrieval snapshot keeps the query as its digest only (never its text) and its hits as document
references, so no snapshot holds what a subject said; documents are the company's own texts and are
searched for the subject's id (a match shows on the receipt; the document is deleted through the
documents API, with its own tombstone).
"""

from __future__ import annotations

from core.erasure import column_place, free_register, place_register

KNOWLEDGE_BASE = (
    "{}: the knowledge base (documents the company wrote), searched for the subject's id; a document "
    "that names the subject is deleted through the documents API"
)


def register() -> None:
    # The postings hold the words of the chunks' texts, and retrieval_terms each word once with its
    # count: searched like the texts (a word leaves with the last chunk that holds it).
    for table, column in (
        ("retrieval_chunks", "text"),
        ("retrieval_documents", "title"),
        ("retrieval_postings", "term"),
        ("retrieval_terms", "term"),
    ):
        place_register(
            column_place(
                table=table,
                column=column,
                kind="text",
                tenant_sql="t.tenant_id = %(tenant)s",
                erased_by="",
                values=False,
                what=KNOWLEDGE_BASE.format(f"{table}.{column}"),
            )
        )
    refs = "document ids, versions, digests, index versions, statuses and ACL groups"
    free_register(
        "retrieval_documents",
        refs,
        "document_id",
        "source_uri",
        "source_version",
        "source_digest",
        "media_type",
        "acl",
        "status",
        "index_version",
    )
    free_register(
        "retrieval_chunks",
        refs,
        "document_key",
        "source_uri",
        "source_version",
        "chunk_id",
        "section",
        "content_digest",
        "index_version",
        "acl",
        "status",
        "embedder_key",
        "stale_reason",
    )
    free_register("retrieval_acls", refs, "acl")
    free_register(
        "retrieval_snapshots",
        "the query's digest (never its text), hits as document references, and "
        "the staff principal that searched",
        "snapshot_id",
        "query_digest",
        "index_version",
        "acl_principal",
        "hits",
    )
    staff = "staff principals and groups, document ids, and what changed in the index"
    free_register("retrieval_principals", staff, "principal", "groups")
    free_register("retrieval_invalidations", staff, "kind", "document_key", "principal", "details", "actor")
    free_register("retrieval_tombstones", staff, "document_key", "version_digests", "actor")
