"""The full-text arm's postings: one row per word of a current claim with its impact, written by
triggers in the same statement as the claim, so a search reads a btree range per word under RLS."""

import django.db.models.deletion
from django.db import migrations, models

from memory.migrations import _rls

# ts_rank of a vector for one lexeme alone; the lexeme is quoted as tsquery input (backslashes and
# quotes escaped), so no parser or dictionary changes it. ts_rank of an OR query is the mean of these.
IMPACT = r"""
CREATE FUNCTION keeper_term_impact(v tsvector, lexeme text) RETURNS real
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$ SELECT ts_rank(v, ('''' || replace(replace(lexeme, E'\\', E'\\\\'), '''', E'\\''') || '''')::tsquery) $$
"""

COLUMNS = "tenant_id, memory_id, term, impact, subject_id, expires_at"
VALUES = "n.tenant_id, n.memory_id, l.lexeme, keeper_term_impact(n.search, l.lexeme), n.subject_id, n.expires_at"
CHANGED = """(n.search, n.invalidated_at, n.expires_at, n.subject_id, n.tenant_id)
             IS DISTINCT FROM (o.search, o.invalidated_at, o.expires_at, o.subject_id, o.tenant_id)"""

# Statement triggers with transition tables: one INSERT of every posting of a bulk insert. An update
# rewrites the postings of the claims whose words, validity, expiry or subject changed; an
# invalidated claim keeps none. A deleted claim's go with it (the foreign key cascades).
TRIGGERS = f"""
CREATE FUNCTION memory_postings_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO memory_postings ({COLUMNS})
    SELECT {VALUES} FROM new_rows n CROSS JOIN LATERAL unnest(n.search) l WHERE n.invalidated_at IS NULL;
    RETURN NULL;
END $$;

CREATE FUNCTION memory_postings_updated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM memory_postings p USING new_rows n JOIN old_rows o ON o.memory_id = n.memory_id
     WHERE p.memory_id = n.memory_id AND {CHANGED};
    INSERT INTO memory_postings ({COLUMNS})
    SELECT {VALUES} FROM new_rows n JOIN old_rows o ON o.memory_id = n.memory_id
           CROSS JOIN LATERAL unnest(n.search) l
     WHERE n.invalidated_at IS NULL AND {CHANGED};
    RETURN NULL;
END $$;

CREATE TRIGGER memory_postings_inserted AFTER INSERT ON memory_items
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION memory_postings_inserted();
CREATE TRIGGER memory_postings_updated AFTER UPDATE ON memory_items
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION memory_postings_updated();
"""

INDEXES = """
DO $$ DECLARE c text; BEGIN
    FOR c IN SELECT conname FROM pg_constraint
              WHERE conrelid = 'memory_postings'::regclass AND contype = 'f'
                AND confrelid = 'memory_items'::regclass LOOP
        EXECUTE format('ALTER TABLE memory_postings DROP CONSTRAINT %I', c);
    END LOOP;
END $$;
ALTER TABLE memory_postings ADD CONSTRAINT memory_postings_memory_fk FOREIGN KEY (memory_id)
    REFERENCES memory_items (memory_id) ON DELETE CASCADE DEFERRABLE INITIALLY DEFERRED;
CREATE INDEX memory_postings_rank ON memory_postings (tenant_id, term, impact DESC, memory_id) INCLUDE (expires_at);
CREATE INDEX memory_postings_subject ON memory_postings (tenant_id, subject_id, term, impact DESC, memory_id)
    INCLUDE (expires_at);
"""

# The claims stored before: the migrating role (the owner) writes their postings with the policies
# not forced on it for this one statement.
BACKFILL = f"""
ALTER TABLE memory_items NO FORCE ROW LEVEL SECURITY;
ALTER TABLE memory_postings NO FORCE ROW LEVEL SECURITY;
INSERT INTO memory_postings ({COLUMNS})
SELECT {VALUES} FROM memory_items n CROSS JOIN LATERAL unnest(n.search) l WHERE n.invalidated_at IS NULL;
ALTER TABLE memory_items FORCE ROW LEVEL SECURITY;
ALTER TABLE memory_postings FORCE ROW LEVEL SECURITY;
"""


class Migration(migrations.Migration):

    dependencies = [
        ('core', '0002_api_keys'),
        ('memory', '0006_stored_search_vector'),
    ]

    operations = [
        migrations.CreateModel(
            name='MemoryPosting',
            fields=[
                ('pk', models.CompositePrimaryKey('memory_id', 'term', blank=True, editable=False, primary_key=True, serialize=False)),
                ('term', models.TextField()),
                ('impact', models.FloatField()),
                ('subject_id', models.TextField()),
                ('expires_at', models.DateTimeField(blank=True, null=True)),
                ('memory', models.ForeignKey(db_column='memory_id', db_index=False, on_delete=django.db.models.deletion.DO_NOTHING, related_name='postings', to='memory.memoryitem')),
                ('tenant', models.ForeignKey(db_column='tenant_id', db_index=False, on_delete=django.db.models.deletion.PROTECT, to='core.tenant')),
            ],
            options={
                'db_table': 'memory_postings',
            },
        ),
        _rls.policy("memory_postings"),
        migrations.RunSQL(
            sql=[IMPACT, INDEXES, TRIGGERS, BACKFILL],
            reverse_sql=[
                "DROP TRIGGER IF EXISTS memory_postings_updated ON memory_items",
                "DROP TRIGGER IF EXISTS memory_postings_inserted ON memory_items",
                "DROP FUNCTION IF EXISTS memory_postings_updated()",
                "DROP FUNCTION IF EXISTS memory_postings_inserted()",
                "DROP FUNCTION IF EXISTS keeper_term_impact(tsvector, text)",
            ],
        ),
    ]
