"""Chinese and Japanese words for the full-text arms: text without spaces between its words was one
"word" to PostgreSQL's parser (a whole sentence), so a search for 退款 never found 要求退款. Runs of
Han and kana characters are indexed as overlapping pairs of characters (as Lucene's CJK analyzer
does; a lone character as itself), and queries are split the same way (memory.postings.query_words).
Other text is indexed as before. The claims already stored with such text get their postings again.
"""

from __future__ import annotations

from importlib import import_module

from django.db import migrations

POSTINGS = import_module("memory.migrations.0007_postings")

# The character class is memory.postings.CJK as PostgreSQL writes it: both sides must split alike.
CJK = r"[\u3005\u3040-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0003134f]"
FUNCTION = rf"""
CREATE FUNCTION keeper_search_text(t text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$
SELECT CASE WHEN t !~ '{CJK}' THEN t
ELSE regexp_replace(t, '{CJK}+', ' ', 'g') || ' ' ||
     (SELECT string_agg(CASE WHEN length(r[1]) = 1 THEN r[1]
                             ELSE (SELECT string_agg(substr(r[1], i, 2), ' ' ORDER BY i)
                                     FROM generate_series(1, length(r[1]) - 1) AS i) END, ' ')
        FROM regexp_matches(t, '{CJK}+', 'g') AS r)
END $$
"""
SOURCE = "namespace || ' ' || replace(key, '_', ' ') || ' ' || value::text"
OLD = f"to_tsvector('simple', {SOURCE})"
NEW = f"to_tsvector('simple', keeper_search_text({SOURCE}))"
HAS_CJK = f"(n.namespace || ' ' || n.key || ' ' || n.value::text) ~ '{CJK}'"

# SET EXPRESSION rewrites the table without firing the postings' triggers: the owner rewrites the
# postings of the claims whose words changed (those with such text), the policies not forced on it.
REPOST = f"""
SET CONSTRAINTS ALL IMMEDIATE;
ALTER TABLE memory_items NO FORCE ROW LEVEL SECURITY;
ALTER TABLE memory_postings NO FORCE ROW LEVEL SECURITY;
DELETE FROM memory_postings p USING memory_items n WHERE p.memory_id = n.memory_id AND {HAS_CJK};
INSERT INTO memory_postings ({POSTINGS.COLUMNS})
SELECT {POSTINGS.VALUES} FROM memory_items n CROSS JOIN LATERAL unnest(n.search) l
 WHERE n.invalidated_at IS NULL AND {HAS_CJK};
ALTER TABLE memory_items FORCE ROW LEVEL SECURITY;
ALTER TABLE memory_postings FORCE ROW LEVEL SECURITY;
"""


class Migration(migrations.Migration):
    dependencies = [("memory", "0010_erasure_requests_keep_what_they_searched")]

    operations = [
        migrations.RunSQL(
            [FUNCTION, f"ALTER TABLE memory_items ALTER COLUMN search SET EXPRESSION AS ({NEW})", REPOST],
            [f"ALTER TABLE memory_items ALTER COLUMN search SET EXPRESSION AS ({OLD})", REPOST,
             "DROP FUNCTION keeper_search_text(text)"],
        )
    ]
