"""Drop memory_items' GIN index on the search vector: under row-level security PostgreSQL cannot use
it (`@@` is not leakproof), the text arm reads memory_postings instead (0007), and every claim
written paid for it. The stored vector stays (the scoped search ranks with it)."""

from __future__ import annotations

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("memory", "0008_held_claims")]
    operations = [
        migrations.RunSQL(
            sql="DROP INDEX IF EXISTS memory_items_search",
            reverse_sql="CREATE INDEX memory_items_search ON memory_items USING gin (search)",
        ),
    ]
