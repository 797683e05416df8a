"""Each word's document frequency per tenant and ACL (retrieval_terms: how many current chunks with that
ACL hold it), kept by triggers on retrieval_chunks in the same statement as the chunks, for the text
arm's idf weights: a search sums the counts of the ACLs its principal may read, so a word's weight
says nothing of documents the principal cannot see.

A statement's changes are summed per row and applied in one upsert in (tenant, word, ACL) order, so
two writers of the same words lock their rows in the same order (no deadlock); the lock is held to
commit, so writers of one ACL's common words take turns there, as for the ACL counts (0004). A
word whose count falls to 0 is deleted in the same trigger: no row keeps a word no chunk holds
(a deleted document's rare words, a name among them, leave with it). Rows a tenant's erasure deleted
before its chunks are not brought back: the count falls below 0 and the row is deleted at once.
"""

import django.db.models.deletion
from django.db import migrations, models

from memory.migrations import _rls

# +1 per word of each chunk that becomes current (or changes its words while current), -1 per word
# of each that stops being current (or changes its words or ACL); age changes move no count.
WORDS = (
    "SELECT {r}.tenant_id, l.lexeme AS term, {r}.acl_key, {sign} AS delta"
    " FROM {rows} CROSS JOIN LATERAL unnest({r}.search) l"
)
MOVED = """(n.status = 'current', n.search, n.tenant_id, n.acl_key)
           IS DISTINCT FROM (o.status = 'current', o.search, o.tenant_id, o.acl_key)"""
PAIRS = "new_rows n JOIN old_rows o ON o.id = n.id"
APPLY = """
    WITH moves AS ({moves}),
    changed AS (
        INSERT INTO retrieval_terms AS t (tenant_id, term, acl_key, chunks)
        SELECT tenant_id, term, acl_key, sum(delta) FROM moves GROUP BY tenant_id, term, acl_key
        HAVING sum(delta) <> 0 ORDER BY tenant_id, term, acl_key
        ON CONFLICT (tenant_id, term, acl_key) DO UPDATE SET chunks = t.chunks + EXCLUDED.chunks
        RETURNING t.tenant_id, t.term, t.acl_key, t.chunks)
    SELECT array_agg(tenant_id), array_agg(term), array_agg(acl_key) INTO gone_tenants, gone_terms, gone_keys
      FROM changed WHERE chunks <= 0;
    -- A statement does not see its own upsert's rows: the words counted down to 0 go in the next one.
    IF gone_terms IS NOT NULL THEN
        DELETE FROM retrieval_terms t
         USING unnest(gone_tenants, gone_terms, gone_keys) AS g(tenant_id, term, acl_key)
         WHERE t.tenant_id = g.tenant_id AND t.term = g.term AND t.acl_key = g.acl_key AND t.chunks <= 0;
    END IF"""

INSERTED = APPLY.format(moves=WORDS.format(r="n", sign=1, rows="new_rows n") + " WHERE n.status = 'current'")
UPDATED = APPLY.format(
    moves=WORDS.format(r="n", sign=1, rows=PAIRS)
    + f" WHERE n.status = 'current' AND {MOVED} UNION ALL "
    + WORDS.format(r="o", sign=-1, rows=PAIRS)
    + f" WHERE o.status = 'current' AND {MOVED}"
)
DELETED = APPLY.format(moves=WORDS.format(r="o", sign=-1, rows="old_rows o") + " WHERE o.status = 'current'")

TRIGGERS = f"""
CREATE FUNCTION retrieval_terms_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    gone_tenants uuid[];
    gone_terms text[];
    gone_keys uuid[];
BEGIN
    {INSERTED};
    RETURN NULL;
END $$;
CREATE FUNCTION retrieval_terms_updated() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    gone_tenants uuid[];
    gone_terms text[];
    gone_keys uuid[];
BEGIN
    {UPDATED};
    RETURN NULL;
END $$;
CREATE FUNCTION retrieval_terms_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    gone_tenants uuid[];
    gone_terms text[];
    gone_keys uuid[];
BEGIN
    {DELETED};
    RETURN NULL;
END $$;
CREATE TRIGGER retrieval_terms_inserted AFTER INSERT ON retrieval_chunks
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION retrieval_terms_inserted();
CREATE TRIGGER retrieval_terms_updated AFTER UPDATE ON retrieval_chunks
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION retrieval_terms_updated();
CREATE TRIGGER retrieval_terms_deleted AFTER DELETE ON retrieval_chunks
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION retrieval_terms_deleted();
"""

# The chunks stored before, counted by the owner with the policies not forced on it for this.
BACKFILL = """
ALTER TABLE retrieval_terms NO FORCE ROW LEVEL SECURITY;
ALTER TABLE retrieval_chunks NO FORCE ROW LEVEL SECURITY;
INSERT INTO retrieval_terms (tenant_id, term, acl_key, chunks)
SELECT c.tenant_id, l.lexeme, c.acl_key, count(*) FROM retrieval_chunks c CROSS JOIN LATERAL unnest(c.search) l
 WHERE c.status = 'current' GROUP BY c.tenant_id, l.lexeme, c.acl_key;
ALTER TABLE retrieval_terms FORCE ROW LEVEL SECURITY;
ALTER TABLE retrieval_chunks FORCE ROW LEVEL SECURITY;
"""

REVERSE = """
DROP TRIGGER IF EXISTS retrieval_terms_inserted ON retrieval_chunks;
DROP TRIGGER IF EXISTS retrieval_terms_updated ON retrieval_chunks;
DROP TRIGGER IF EXISTS retrieval_terms_deleted ON retrieval_chunks;
DROP FUNCTION IF EXISTS retrieval_terms_inserted();
DROP FUNCTION IF EXISTS retrieval_terms_updated();
DROP FUNCTION IF EXISTS retrieval_terms_deleted();
"""


class Migration(migrations.Migration):
    dependencies = [
        ("core", "0003_tenant_offboardings"),
        ("retrieval", "0005_acl_counts_only_decrease_on_delete"),
    ]

    operations = [
        migrations.CreateModel(
            name="ChunkTerm",
            fields=[
                (
                    "pk",
                    models.CompositePrimaryKey(
                        "tenant_id", "term", "acl_key", blank=True, editable=False, primary_key=True, serialize=False
                    ),
                ),
                ("term", models.TextField()),
                ("acl_key", models.UUIDField()),
                ("chunks", models.IntegerField()),
                (
                    "tenant",
                    models.ForeignKey(
                        db_column="tenant_id",
                        db_index=False,
                        on_delete=django.db.models.deletion.PROTECT,
                        to="core.tenant",
                    ),
                ),
            ],
            options={"db_table": "retrieval_terms"},
        ),
        _rls.policy("retrieval_terms"),
        migrations.RunSQL(sql=[TRIGGERS, BACKFILL], reverse_sql=[REVERSE]),
    ]
