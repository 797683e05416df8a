"""Top-k full-text ranking over impact-ordered postings (memory_postings), with a per-word cutoff,
exact scores for a bounded candidate set, and rounds that read deeper until proven. (Retrieval's arm
weighs words by idf and proves its top with its own statement: retrieval.text_arm.text_statement.)

Why postings: under row-level security PostgreSQL cannot use a GIN index for `@@` (ts_match_vq is
not leakproof), so ranking with ts_rank reads and scores every row of the tenant that matches. A
posting table holds one row per (document, word) with the word's impact, and a btree on
(tenant, word, impact desc) answers "the best postings of this word" with plain `=` comparisons,
which RLS allows inside an index scan.

Scoring is ts_rank's for "any of the words": ts_rank(v, 'a | b | c') is the mean over the words of
ts_rank(v, word), each of which the posting keeps as `impact` (keeper_term_impact, written by the
tables' triggers). So the ranking is ts_rank's over every match, computed from a few index ranges.

Both search arms read by default every posting of the words that passes the filters, in one
aggregate (whole_statement): measured, that beat rounds at every first depth tried, because ts_rank
weighs words alike and a cut round rarely proves a top 50. Rounds (ranked with a depth) remain for
callers that want a bounded first read.
"""

from __future__ import annotations

import re
from typing import Any

Statement = tuple[str, list[Any]]

TERM_DEPTH = 2000  # postings read per word in the first round, highest impact first
DEEPEN = 8  # each further round reads this many times deeper; past MAX_DEPTH, every posting
MAX_DEPTH = 1_000_000
RESCORE = 200  # candidates scored exactly from their own postings (at least the k asked)


# Han ideographs (and 々) and kana: written without spaces between words. Chunking counts each as a
# word (retrieval.chunking); search takes each run of them as overlapping pairs of characters (a lone
# one as itself), as the search vectors split it (keeper_search_text, memory migration 0011, which
# holds the same class as PostgreSQL writes it). Hangul is written with spaces: it is a word as Latin is.
CJK_CHARS = "\u3005\u3040-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0003134f"
CJK = f"[{CJK_CHARS}]"


def query_words(query: str) -> list[str]:
    """The query's words, as the search vectors hold them (any of them may match)."""
    text = query.lower()
    words = re.findall(r"\w+", re.sub(CJK + "+", " ", text))
    for run in re.findall(CJK + "+", text):
        words += [run] if len(run) == 1 else [run[i : i + 2] for i in range(len(run) - 1)]
    return list(dict.fromkeys(words))


def ranked_statement(
    *,
    table: str,
    id_column: str,
    words: list[str],
    where: str,
    params: list[Any],
    limit: int,
    depth: int | None,
) -> Statement:
    """One round: per word, its first `depth` postings that pass `where` (on alias p, beside
    `p.term = q.term`); each candidate's bound; the RESCORE best bounds scored exactly.

    The postings of a word past its first `depth` have at most the impact of the last one read (the
    word's `rest`), so a document never read scores at most the mean of the rests, and one read under
    some words at most what was read plus the rests of the others. A document read under every cut
    word has its exact score already; for the others, what was read of the words read whole is exact
    and the cut words are looked up in their own postings (the primary key's btree, one probe per
    cut word). Each row: the document, its exact
    score, the bound of every document never read, and the highest bound of a document read but not
    scored (NULL if none). `table` and `id_column` are Keeper's own names, never input.
    """
    if depth is None:
        return whole_statement(
            table=table, id_column=id_column, words=words, where=where, params=params, limit=limit
        )
    cap, cap_params = "LIMIT %s", [int(depth)]
    rescore = max(RESCORE, limit)
    sql = f"""
        WITH q AS MATERIALIZED (
            SELECT DISTINCT unnest(tsvector_to_array(to_tsvector('simple', w))) AS term FROM unnest(%s::text[]) AS w),
        n AS (SELECT greatest(count(*), 1)::float8 AS words FROM q),
        hits AS MATERIALIZED (
            SELECT q.term, p.doc, p.impact FROM q CROSS JOIN LATERAL (
                SELECT p.{id_column} AS doc, p.impact FROM {table} p WHERE p.term = q.term AND {where}
                 ORDER BY p.impact DESC, p.{id_column} {cap}) p),
        cut AS MATERIALIZED (
            SELECT term, CASE WHEN count(*) >= %s THEN min(impact) ELSE 0 END AS rest FROM hits GROUP BY term),
        unread AS (SELECT coalesce(sum(rest), 0) / (SELECT words FROM n) AS bound FROM cut),
        best AS MATERIALIZED (
            SELECT h.doc, sum(h.impact) AS seen, count(*) FILTER (WHERE c.rest > 0) AS cut_seen,
                   coalesce(sum(h.impact) FILTER (WHERE c.rest = 0), 0) AS seen_whole,
                   sum(h.impact) - sum(c.rest) AS key
              FROM hits h JOIN cut c USING (term) GROUP BY h.doc
             ORDER BY key DESC, h.doc LIMIT %s + 1),
        bound AS MATERIALIZED (
            SELECT b.*, b.key / (SELECT words FROM n) + (SELECT bound FROM unread) AS upper,
                   row_number() OVER (ORDER BY b.key DESC, b.doc) AS place
              FROM best b),
        scored AS (
            SELECT b.doc, (CASE WHEN b.cut_seen = (SELECT count(*) FROM cut WHERE rest > 0) THEN b.seen
                                ELSE b.seen_whole + coalesce((
                                     SELECT sum(p.impact) FROM {table} p WHERE p.{id_column} = b.doc
                                        AND p.term = ANY(ARRAY(SELECT term FROM cut WHERE rest > 0))), 0)
                           END / (SELECT words FROM n))::real AS score
              FROM bound b WHERE b.place <= %s)
        SELECT s.doc, s.score, (SELECT bound FROM unread), (SELECT upper FROM bound WHERE place = %s + 1)
          FROM scored s ORDER BY s.score DESC, s.doc LIMIT %s"""  # noqa: S608 - names are Keeper's own
    return sql, [words, *params, *cap_params, depth, rescore, rescore, rescore, limit]


def whole_statement(
    *, table: str, id_column: str, words: list[str], where: str, params: list[Any], limit: int
) -> Statement:
    """Every posting of the words that passes `where`, summed per document: the exact ranking in one
    pass (an index range per word, one hash aggregate, a top-k sort), with no bound to prove and no
    second look at a document. Rows as ranked_statement's, nothing left unread or unscored.

    This is the last round, and the only one where a round with a cut could not prove anything:
    ts_rank weighs every word alike (no rarity), so when every word is common (a small vocabulary,
    as claims have) the k best are the documents with the most of the words, which can be anywhere
    in the lists. Reading them whole costs about what a first round at a large depth did, and a third
    of what that round's bound bookkeeping cost on top."""
    sql = f"""
        WITH q AS MATERIALIZED (
            SELECT DISTINCT unnest(tsvector_to_array(to_tsvector('simple', w))) AS term FROM unnest(%s::text[]) AS w)
        SELECT p.doc, (sum(p.impact) / (SELECT greatest(count(*), 1) FROM q))::real AS score, 0.0::float8, NULL::float8
          FROM q CROSS JOIN LATERAL (
               SELECT p.{id_column} AS doc, p.impact FROM {table} p WHERE p.term = q.term AND {where}) p
         GROUP BY p.doc ORDER BY score DESC, p.doc LIMIT %s"""  # noqa: S608 - names are Keeper's own
    return sql, [words, *params, limit]


def proven(rows: list[Any], limit: int) -> bool:
    """Whether a round's rows (id, score, bound of the unread, highest bound of the unscored) are the
    exact top `limit`. Scores within float4's precision count as equal (ts_rank's own last digit
    depends on the order it adds the words in). Fewer rows than asked are all there is only when
    nothing was left unread or unscored."""
    unread = float(rows[0][2]) if rows else 0.0
    unscored = float(rows[0][3]) if rows and rows[0][3] is not None else 0.0
    if len(rows) < limit:
        return unread == 0 and unscored == 0
    return float(rows[limit - 1][1]) + 1e-6 >= max(unread, unscored)


def ranked(cursor: Any, build: Any, *, limit: int, depth: int | None = TERM_DEPTH) -> list[Any]:
    """Run rounds of `build(depth)` (a Statement) on a DB-API cursor (Django's, or the benchmark's
    psycopg one) until the top `limit` is proven; depth=None reads every posting at once (the exact
    ranking the benchmark compares with)."""
    while True:
        sql, params = build(depth)
        cursor.execute(sql, params)
        rows = cursor.fetchall()
        if depth is None or proven(rows, limit):
            return [row[0] for row in rows]
        depth = depth * DEEPEN if depth * DEEPEN < MAX_DEPTH else None
