"""Deleting chunks only lowers the counts of ACL rows that still exist (retrieval 0004 upserted them):
a tenant's erasure deletes its retrieval_acls before its chunks, and the upsert brought the rows back
with negative counts, so deleting the tenant itself failed on their foreign key. The rows are still
locked in key order before they are updated (no deadlock between writers of the same ACLs)."""

import importlib

from django.db import migrations

PREVIOUS = importlib.import_module("retrieval.migrations.0004_acl_chunk_counts")

DELETED = """
CREATE OR REPLACE FUNCTION retrieval_acls_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM retrieval_acls a
     WHERE a.acl_key IN (SELECT o.acl_key FROM old_rows o WHERE o.status = 'current')
     ORDER BY a.acl_key FOR UPDATE;
    UPDATE retrieval_acls a SET chunks = a.chunks - m.gone
      FROM (SELECT o.acl_key, count(*) AS gone FROM old_rows o WHERE o.status = 'current'
             GROUP BY o.acl_key) m
     WHERE a.acl_key = m.acl_key;
    RETURN NULL;
END $$;
"""

DELETED_BEFORE = f"""
CREATE OR REPLACE FUNCTION retrieval_acls_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    {PREVIOUS.COUNT_DELETED};
    RETURN NULL;
END $$;
"""


class Migration(migrations.Migration):
    dependencies = [("retrieval", "0004_acl_chunk_counts")]

    operations = [migrations.RunSQL(DELETED, DELETED_BEFORE)]
