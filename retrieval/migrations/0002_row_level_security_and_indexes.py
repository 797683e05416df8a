"""Row-level security on every retrieval table; the stored full-text vector of a chunk; the indexes a
search needs (ACL overlap, text). There is no shared HNSW graph: a tenant's vector search is an
exact scan until the tenant is large enough for its own HNSW index (retrieval.indexes), so no
tenant's top-k ever depends on another tenant's rows."""

from django.db import migrations

from memory.migrations import _rls

TABLES = ["retrieval_documents", "retrieval_chunks", "retrieval_principals", "retrieval_invalidations",
          "retrieval_tombstones", "retrieval_snapshots"]


class Migration(migrations.Migration):
    dependencies = [("retrieval", "0001_initial"), ("memory", "0006_stored_search_vector")]
    operations = [
        *[_rls.policy(table) for table in TABLES],
        migrations.RunSQL(
            sql=[
                "ALTER TABLE retrieval_chunks ADD COLUMN search tsvector "
                "GENERATED ALWAYS AS (to_tsvector('simple', text)) STORED",
                "CREATE INDEX retrieval_chunks_search ON retrieval_chunks USING gin (search) "
                "WHERE status = 'current'",
                "CREATE INDEX retrieval_chunks_acl ON retrieval_chunks USING gin (acl) WHERE status = 'current'",
                "CREATE INDEX retrieval_chunks_tenant_current ON retrieval_chunks (tenant_id, embedder_key) "
                "WHERE status = 'current'",
            ],
            reverse_sql=[
                "DROP INDEX IF EXISTS retrieval_chunks_tenant_current",
                "DROP INDEX IF EXISTS retrieval_chunks_acl",
                "DROP INDEX IF EXISTS retrieval_chunks_search",
                "ALTER TABLE retrieval_chunks DROP COLUMN IF EXISTS search",
            ],
        ),
    ]
