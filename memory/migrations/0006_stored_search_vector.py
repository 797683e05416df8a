"""The full-text vector of a claim, stored and indexed, so a search ranks without recomputing it
row by row and can combine the tenant predicate with the text index."""

from django.db import migrations

EXPRESSION = "to_tsvector('simple', namespace || ' ' || replace(key, '_', ' ') || ' ' || value::text)"


class Migration(migrations.Migration):
    dependencies = [("memory", "0005_memory_full_text_index")]
    operations = [
        migrations.RunSQL(
            sql=[
                f"ALTER TABLE memory_items ADD COLUMN search tsvector GENERATED ALWAYS AS ({EXPRESSION}) STORED",
                "DROP INDEX IF EXISTS memory_items_fts",
                "CREATE INDEX memory_items_search ON memory_items USING gin (search)",
            ],
            reverse_sql=[
                "DROP INDEX IF EXISTS memory_items_search",
                "ALTER TABLE memory_items DROP COLUMN IF EXISTS search",
                f"CREATE INDEX memory_items_fts ON memory_items USING gin (({EXPRESSION}))",
            ],
        ),
    ]
