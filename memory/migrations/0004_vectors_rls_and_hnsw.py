"""Row-level security on the vector, erasure and tombstone tables; an HNSW index for the default
embedder's dimension (256), used with pgvector's iterative scans so a tenant's top-k is complete."""

from django.db import migrations

from memory.migrations import _rls


class Migration(migrations.Migration):
    dependencies = [("memory", "0003_vectors_erasure_tombstones")]
    operations = [
        _rls.policy("memory_vectors"),
        _rls.policy("erasure_requests"),
        _rls.policy("memory_tombstones"),
        migrations.RunSQL(
            sql="""CREATE INDEX memory_vectors_hnsw_256 ON memory_vectors
                   USING hnsw ((embedding::vector(256)) vector_cosine_ops) WHERE dimensions = 256""",
            reverse_sql="DROP INDEX IF EXISTS memory_vectors_hnsw_256",
        ),
    ]
