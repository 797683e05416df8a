"""Chinese and Japanese words for the chunks' full-text arm (memory 0011's keeper_search_text): the
search vector splits runs of Han and kana characters into pairs. The chunks with such text get their
postings again; the word counts (retrieval_terms) are counted again from the chunks."""

from __future__ import annotations

from importlib import import_module

from django.db import migrations

CJK = import_module("memory.migrations.0011_cjk_words").CJK
POSTINGS = import_module("retrieval.migrations.0003_postings")
TERMS = import_module("retrieval.migrations.0006_term_frequencies")

OLD = "to_tsvector('simple', text)"
NEW = "to_tsvector('simple', keeper_search_text(text))"
HAS_CJK = f"n.text ~ '{CJK}'"

REPOST = f"""
SET CONSTRAINTS ALL IMMEDIATE;
ALTER TABLE retrieval_chunks NO FORCE ROW LEVEL SECURITY;
ALTER TABLE retrieval_postings NO FORCE ROW LEVEL SECURITY;
DELETE FROM retrieval_postings p USING retrieval_chunks n WHERE p.chunk = n.id AND {HAS_CJK};
INSERT INTO retrieval_postings ({POSTINGS.COLUMNS})
SELECT {POSTINGS.VALUES} FROM retrieval_chunks n CROSS JOIN LATERAL unnest(n.search) l
 WHERE n.status = 'current' AND {HAS_CJK};
ALTER TABLE retrieval_chunks FORCE ROW LEVEL SECURITY;
ALTER TABLE retrieval_postings FORCE ROW LEVEL SECURITY;
ALTER TABLE retrieval_terms NO FORCE ROW LEVEL SECURITY;
DELETE FROM retrieval_terms;
ALTER TABLE retrieval_terms FORCE ROW LEVEL SECURITY;
{TERMS.BACKFILL}
"""


class Migration(migrations.Migration):
    dependencies = [("retrieval", "0006_term_frequencies"), ("memory", "0011_cjk_words")]

    operations = [
        migrations.RunSQL(
            [f"ALTER TABLE retrieval_chunks ALTER COLUMN search SET EXPRESSION AS ({NEW})", REPOST],
            [f"ALTER TABLE retrieval_chunks ALTER COLUMN search SET EXPRESSION AS ({OLD})", REPOST],
        )
    ]
