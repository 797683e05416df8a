"""The full-text arm's postings for chunks: one row per word of a current chunk with its impact, its
ACL's key and indexed_at, written by triggers in the same statement as the chunk; each distinct ACL
once (retrieval_acls), and the chunk's own ACL key (a generated column with a btree), so a search
filters postings and chunks by ACL key with `=` under RLS."""

import django.contrib.postgres.fields
import django.db.models.deletion
from django.db import migrations, models

from memory.migrations import _rls

FUNCTIONS = """
CREATE FUNCTION retrieval_acl_sorted(acl text[]) RETURNS text[]
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$ SELECT coalesce(array_agg(DISTINCT x ORDER BY x), '{}') FROM unnest(acl) AS x $$;

CREATE FUNCTION retrieval_acl_key(tenant uuid, acl text[]) RETURNS uuid
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$ SELECT md5(tenant::text || ':' || retrieval_acl_sorted(acl)::text)::uuid $$;

-- The chunk's ACL key too, so the vector arm finds a principal's few chunks by btree under RLS.
ALTER TABLE retrieval_chunks ADD COLUMN acl_key uuid GENERATED ALWAYS AS (retrieval_acl_key(tenant_id, acl)) STORED;
CREATE INDEX retrieval_chunks_acl_key ON retrieval_chunks (tenant_id, acl_key) WHERE status = 'current';
"""

COLUMNS = "tenant_id, chunk, term, impact, acl_key, indexed_at"
VALUES = """n.tenant_id, n.id, l.lexeme, keeper_term_impact(n.search, l.lexeme),
            retrieval_acl_key(n.tenant_id, n.acl), n.indexed_at"""
CHANGED = """(n.search, n.status, n.acl, n.indexed_at, n.tenant_id)
             IS DISTINCT FROM (o.search, o.status, o.acl, o.indexed_at, o.tenant_id)"""
ACLS = """INSERT INTO retrieval_acls (acl_key, tenant_id, acl)
    SELECT DISTINCT retrieval_acl_key(n.tenant_id, n.acl), n.tenant_id, retrieval_acl_sorted(n.acl) FROM {rows}
     WHERE n.status = 'current' ON CONFLICT DO NOTHING"""

ACLS_NEW = ACLS.format(rows="new_rows n")
ACLS_CHANGED = ACLS.format(rows="new_rows n JOIN old_rows o ON o.id = n.id").replace("WHERE", f"WHERE {CHANGED} AND")

# Statement triggers with transition tables: one INSERT of every posting of a bulk write. Postings
# exist only while the chunk is current; an update rewrites them when its words, status, ACL or
# indexed_at changed. A deleted chunk's go with it (the foreign key cascades).
TRIGGERS = f"""
CREATE FUNCTION retrieval_postings_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    {ACLS_NEW};
    INSERT INTO retrieval_postings ({COLUMNS})
    SELECT {VALUES} FROM new_rows n CROSS JOIN LATERAL unnest(n.search) l WHERE n.status = 'current';
    RETURN NULL;
END $$;

CREATE FUNCTION retrieval_postings_updated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM retrieval_postings p USING new_rows n JOIN old_rows o ON o.id = n.id
     WHERE p.chunk = n.id AND {CHANGED};
    {ACLS_CHANGED};
    INSERT INTO retrieval_postings ({COLUMNS})
    SELECT {VALUES} FROM new_rows n JOIN old_rows o ON o.id = n.id CROSS JOIN LATERAL unnest(n.search) l
     WHERE n.status = 'current' AND {CHANGED};
    RETURN NULL;
END $$;

CREATE TRIGGER retrieval_postings_inserted AFTER INSERT ON retrieval_chunks
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION retrieval_postings_inserted();
CREATE TRIGGER retrieval_postings_updated AFTER UPDATE ON retrieval_chunks
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION retrieval_postings_updated();
"""

INDEXES = """
DO $$ DECLARE c text; BEGIN
    FOR c IN SELECT conname FROM pg_constraint
              WHERE conrelid = 'retrieval_postings'::regclass AND contype = 'f'
                AND confrelid = 'retrieval_chunks'::regclass LOOP
        EXECUTE format('ALTER TABLE retrieval_postings DROP CONSTRAINT %I', c);
    END LOOP;
END $$;
ALTER TABLE retrieval_postings ADD CONSTRAINT retrieval_postings_chunk_fk FOREIGN KEY (chunk)
    REFERENCES retrieval_chunks (id) ON DELETE CASCADE DEFERRABLE INITIALLY DEFERRED;
CREATE INDEX retrieval_postings_rank ON retrieval_postings (tenant_id, term, impact DESC, chunk)
    INCLUDE (acl_key, indexed_at);
CREATE INDEX retrieval_postings_acl ON retrieval_postings (tenant_id, acl_key, term, impact DESC, chunk)
    INCLUDE (indexed_at);
"""

ACLS_ALL = ACLS.format(rows="retrieval_chunks n")

# The chunks stored before: the migrating role (the owner) writes their postings with the policies
# not forced on it for these statements.
BACKFILL = f"""
ALTER TABLE retrieval_chunks NO FORCE ROW LEVEL SECURITY;
ALTER TABLE retrieval_postings NO FORCE ROW LEVEL SECURITY;
ALTER TABLE retrieval_acls NO FORCE ROW LEVEL SECURITY;
{ACLS_ALL};
INSERT INTO retrieval_postings ({COLUMNS})
SELECT {VALUES} FROM retrieval_chunks n CROSS JOIN LATERAL unnest(n.search) l WHERE n.status = 'current';
ALTER TABLE retrieval_chunks FORCE ROW LEVEL SECURITY;
ALTER TABLE retrieval_postings FORCE ROW LEVEL SECURITY;
ALTER TABLE retrieval_acls FORCE ROW LEVEL SECURITY;
"""


class Migration(migrations.Migration):

    dependencies = [
        ('core', '0002_api_keys'),
        ('memory', '0007_postings'),
        ('retrieval', '0002_row_level_security_and_indexes'),
    ]

    operations = [
        migrations.CreateModel(
            name='ChunkAcl',
            fields=[
                ('acl_key', models.UUIDField(primary_key=True, serialize=False)),
                ('acl', django.contrib.postgres.fields.ArrayField(base_field=models.TextField(), default=list, size=None)),
                ('tenant', models.ForeignKey(db_column='tenant_id', on_delete=django.db.models.deletion.PROTECT, to='core.tenant')),
            ],
            options={
                'db_table': 'retrieval_acls',
            },
        ),
        migrations.CreateModel(
            name='ChunkPosting',
            fields=[
                ('pk', models.CompositePrimaryKey('chunk_id', 'term', blank=True, editable=False, primary_key=True, serialize=False)),
                ('term', models.TextField()),
                ('impact', models.FloatField()),
                ('acl_key', models.UUIDField()),
                ('indexed_at', models.DateTimeField(blank=True, null=True)),
                ('chunk', models.ForeignKey(db_column='chunk', db_index=False, on_delete=django.db.models.deletion.DO_NOTHING, to='retrieval.chunk')),
                ('tenant', models.ForeignKey(db_column='tenant_id', db_index=False, on_delete=django.db.models.deletion.PROTECT, to='core.tenant')),
            ],
            options={
                'db_table': 'retrieval_postings',
            },
        ),
        _rls.policy("retrieval_acls"),
        _rls.policy("retrieval_postings"),
        migrations.RunSQL(
            sql=[FUNCTIONS, INDEXES, TRIGGERS, BACKFILL],
            reverse_sql=[
                "DROP TRIGGER IF EXISTS retrieval_postings_updated ON retrieval_chunks",
                "DROP TRIGGER IF EXISTS retrieval_postings_inserted ON retrieval_chunks",
                "DROP FUNCTION IF EXISTS retrieval_postings_updated()",
                "DROP FUNCTION IF EXISTS retrieval_postings_inserted()",
                "ALTER TABLE retrieval_chunks DROP COLUMN IF EXISTS acl_key",
                "DROP FUNCTION IF EXISTS retrieval_acl_key(uuid, text[])",
                "DROP FUNCTION IF EXISTS retrieval_acl_sorted(text[])",
            ],
        ),
    ]
