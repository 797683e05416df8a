"""A GIN index for the full-text half of hybrid memory search (the same expression the query uses)."""

from django.db import migrations

EXPRESSION = "to_tsvector('simple', namespace || ' ' || replace(key, '_', ' ') || ' ' || value::text)"


class Migration(migrations.Migration):
    dependencies = [("memory", "0004_vectors_rls_and_hnsw")]
    operations = [
        migrations.RunSQL(
            sql=f"CREATE INDEX memory_items_fts ON memory_items USING gin (({EXPRESSION}))",
            reverse_sql="DROP INDEX IF EXISTS memory_items_fts",
        ),
    ]
