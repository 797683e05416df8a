"""Each ACL of retrieval_acls counts the tenant's current chunks that carry it, kept by the chunk
triggers in the same statement as the chunks (insert, update, delete), so a search learns how much a
principal reads, and of how much, from the few rows of its keys instead of counting chunks."""

import importlib

from django.db import migrations, models

# 0003's trigger functions (the reverse puts them back); its name starts with a digit.
POSTINGS = importlib.import_module("retrieval.migrations.0003_postings")
COLUMNS, VALUES, CHANGED = POSTINGS.COLUMNS, POSTINGS.VALUES, POSTINGS.CHANGED

# Adds each key's change to its row, creating the row of an ACL seen for the first time. Rows are
# taken in key order, so two statements that move chunks between the same ACLs lock them in the same
# order (no deadlock); the lock is held to commit, so writers of one ACL's chunks take turns there.
COUNT = """INSERT INTO retrieval_acls (acl_key, tenant_id, acl, chunks)
    SELECT acl_key, tenant_id, acl, sum(delta) FROM ({moves}) AS m
     GROUP BY acl_key, tenant_id, acl HAVING sum(delta) <> 0 ORDER BY acl_key
    ON CONFLICT (acl_key) DO UPDATE SET chunks = retrieval_acls.chunks + EXCLUDED.chunks"""
CURRENT = "SELECT {r}.acl_key, {r}.tenant_id, retrieval_acl_sorted({r}.acl) AS acl, {sign} AS delta FROM {rows}"
# A row moves between counts when it becomes or stops being current, or its ACL (or tenant) changes.
MOVED = "(n.status, n.acl_key) IS DISTINCT FROM (o.status, o.acl_key)"
PAIRS = "new_rows n JOIN old_rows o ON o.id = n.id"

COUNT_INSERTED = COUNT.format(moves=CURRENT.format(r="n", sign=1, rows="new_rows n WHERE n.status = 'current'"))
COUNT_UPDATED = COUNT.format(
    moves=CURRENT.format(r="n", sign=1, rows=f"{PAIRS} WHERE n.status = 'current' AND {MOVED}")
    + " UNION ALL "
    + CURRENT.format(r="o", sign=-1, rows=f"{PAIRS} WHERE o.status = 'current' AND {MOVED}")
)
COUNT_DELETED = COUNT.format(moves=CURRENT.format(r="o", sign=-1, rows="old_rows o WHERE o.status = 'current'"))

FUNCTIONS = f"""
CREATE OR REPLACE FUNCTION retrieval_postings_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    {COUNT_INSERTED};
    INSERT INTO retrieval_postings ({COLUMNS})
    SELECT {VALUES} FROM new_rows n CROSS JOIN LATERAL unnest(n.search) l WHERE n.status = 'current';
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION retrieval_postings_updated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM retrieval_postings p USING {PAIRS}
     WHERE p.chunk = n.id AND {CHANGED};
    {COUNT_UPDATED};
    INSERT INTO retrieval_postings ({COLUMNS})
    SELECT {VALUES} FROM {PAIRS} CROSS JOIN LATERAL unnest(n.search) l
     WHERE n.status = 'current' AND {CHANGED};
    RETURN NULL;
END $$;

CREATE FUNCTION retrieval_acls_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    {COUNT_DELETED};
    RETURN NULL;
END $$;

CREATE TRIGGER retrieval_acls_deleted AFTER DELETE ON retrieval_chunks
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION retrieval_acls_deleted();
"""

# The chunks stored before, counted by the owner with the policies not forced on it for this.
BACKFILL = """
ALTER TABLE retrieval_acls NO FORCE ROW LEVEL SECURITY;
ALTER TABLE retrieval_chunks NO FORCE ROW LEVEL SECURITY;
UPDATE retrieval_acls a SET chunks = c.chunks
  FROM (SELECT acl_key, count(*) AS chunks FROM retrieval_chunks WHERE status = 'current' GROUP BY acl_key) c
 WHERE a.acl_key = c.acl_key;
ALTER TABLE retrieval_acls FORCE ROW LEVEL SECURITY;
ALTER TABLE retrieval_chunks FORCE ROW LEVEL SECURITY;
"""

REVERSE = f"""
DROP TRIGGER IF EXISTS retrieval_acls_deleted ON retrieval_chunks;
DROP FUNCTION IF EXISTS retrieval_acls_deleted();
CREATE OR REPLACE FUNCTION retrieval_postings_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    {POSTINGS.ACLS_NEW};
    INSERT INTO retrieval_postings ({COLUMNS})
    SELECT {VALUES} FROM new_rows n CROSS JOIN LATERAL unnest(n.search) l WHERE n.status = 'current';
    RETURN NULL;
END $$;
CREATE OR REPLACE FUNCTION retrieval_postings_updated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM retrieval_postings p USING {PAIRS}
     WHERE p.chunk = n.id AND {CHANGED};
    {POSTINGS.ACLS_CHANGED};
    INSERT INTO retrieval_postings ({COLUMNS})
    SELECT {VALUES} FROM {PAIRS} CROSS JOIN LATERAL unnest(n.search) l
     WHERE n.status = 'current' AND {CHANGED};
    RETURN NULL;
END $$;
"""


class Migration(migrations.Migration):
    dependencies = [("retrieval", "0003_postings")]

    operations = [
        migrations.AddField(
            model_name="chunkacl",
            name="chunks",
            field=models.IntegerField(db_default=0),
        ),
        migrations.RunSQL(sql=[FUNCTIONS, BACKFILL], reverse_sql=[REVERSE]),
    ]
