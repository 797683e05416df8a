"""The full-text arm of a search: the query's words weighed by how many readable chunks hold them, and
one statement whose top is exact (the rare words' postings first, the common words' only for the
chunks those found)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from django.db import connection

from core.models import Tenant
from memory.postings import Statement, query_words
from retrieval.readable import readable_acl_keys

# The text arm's words held by more than this share of the tenant's chunks are its common words: their
# postings are read only for chunks the rarer words found (see text_statement). Measured over 150,000
# chunks and a Zipf vocabulary, for a principal reading 40%: 0.05, 0.1 and 0.2 proved the top 50 in
# 51, 58 and 58 of 60 queries, in 4.0, 5.1 and 6.4 ms p50, against 19 ms for every posting.
COMMON_SHARE = 0.1
# How many of the chunks the rare words rank first are scored whole before the bound is taken.
FIRST_SCORED = 200


# The query's words as the postings hold them (the triggers store to_tsvector('simple') lexemes), each
# with how many current chunks the principal may read hold it (retrieval_terms, summed over the
# principal's ACL keys) and how many current chunks the principal may read (retrieval_acls): a word
# no readable chunk holds has no row and is left out. Without keys (the benchmark's baseline, no
# ACL predicate), over all the tenant's chunks.
WEIGHTS = """
    SELECT t.term, sum(t.chunks), (SELECT greatest(coalesce(sum(a.chunks), 0), 1) FROM retrieval_acls a
                                    WHERE a.tenant_id = %(tenant)s {acls})
      FROM retrieval_terms t
     WHERE t.tenant_id = %(tenant)s {terms_acls}
       AND t.term = ANY(ARRAY(SELECT DISTINCT unnest(tsvector_to_array(to_tsvector('simple', w)))
                                FROM unnest(%(words)s::text[]) AS w))
     GROUP BY t.term ORDER BY t.term"""


@dataclass(frozen=True)
class Weights:
    """The query's words split by how common they are, each with its idf (BM25's)."""

    rare: dict[str, float]
    common: dict[str, float]


def query_weights(cursor: Any, tenant_id: UUID, words: list[str], keys: list[UUID] | None) -> Weights:
    """The weights of the query's words among the chunks the keys open (a round trip of its own:
    sent as literal arrays, the words let the planner size each one's range and reach the postings by
    ACL key and word at once). Counted over what the principal may read only, so how two words weigh
    says nothing of documents it cannot see."""
    weights = Weights({}, {})
    if not words:
        return weights
    if keys is None:
        sql = WEIGHTS.format(acls="", terms_acls="")
    else:
        sql = WEIGHTS.format(
            acls="AND a.acl_key = ANY(%(keys)s::uuid[])", terms_acls="AND t.acl_key = ANY(%(keys)s::uuid[])"
        )
    cursor.execute(sql, {"tenant": tenant_id, "words": words, "keys": keys})
    for term, chunks, docs in cursor.fetchall():
        idf = math.log(1 + (docs - chunks + 0.5) / (chunks + 0.5))
        (weights.rare if chunks <= docs * COMMON_SHARE else weights.common)[term] = idf
    return weights


def _positional(sql: str, params: dict[str, Any]) -> Statement:
    """A statement written with %(name)s placeholders as one with %s and its parameters in order (the
    arms' statements are joined with others and sent with one list)."""
    order: list[Any] = []

    def take(match: re.Match[str]) -> str:
        order.append(params[match.group(1)])
        return "%s"

    return re.sub(r"%\((\w+)\)s", take, sql), order


def text_statement(
    *,
    tenant_id: UUID,
    weights: Weights,
    keys: list[UUID] | None,
    limit: int,
    cutoff: Any = None,
    exact: bool = False,
) -> Statement:
    """The text arm over retrieval_postings: rows (chunk, score, proven), best first, at most `limit`.

    A chunk scores the sum, over the query's words it holds, of the word's impact (ts_rank of the
    chunk for that word alone) times the word's idf: a word most chunks hold weighs little. The ACL
    (as readable keys), the tenant and the age filter each posting, with `=` and `>=` that row-level
    security lets the btree apply.

    exact=True, or words all rare or all common: every readable posting of the words, summed per
    chunk (the ranking the benchmark compares with). Otherwise (MaxScore): the postings of the rare
    words are read, the FIRST_SCORED chunks they rank first are scored whole (the common words looked
    up for those chunks alone, by primary key), and the limit-th of those scores is a bound θ. A chunk
    no rare word found scores at most the sum of the common words' best weights, and one found scores
    at most what the rare words gave it plus that sum: when the first is below θ, every chunk that
    could reach θ is scored whole and the top is exact (`proven`). When not, the statement reads
    every posting instead, in the same round trip."""
    where = "p.tenant_id = %(tenant)s"
    if keys is not None:
        where += " AND p.acl_key = ANY(%(keys)s::uuid[])"
    if cutoff is not None:
        where += " AND p.indexed_at >= %(cutoff)s"
    every = {**weights.rare, **weights.common}
    params = {
        "tenant": tenant_id,
        "keys": keys,
        "cutoff": cutoff,
        "limit": limit,
        "first": max(FIRST_SCORED, limit),
        "slack": 1e-5,  # above a real's rounding of a score: a bound never cuts a chunk that ties θ
        "terms": list(every),
        "terms_idf": list(every.values()),
        "rare": list(weights.rare),
        "rare_idf": list(weights.rare.values()),
        "common": list(weights.common),
        "common_idf": list(weights.common.values()),
    }

    def summed(terms: str) -> str:  # every readable posting of these words, weighted, per chunk
        # The weight is looked up in the array, not joined: the btree reads the postings by ACL key
        # and word at once only when nothing else drives the scan.
        weight = f"(%({terms}_idf)s::float8[])[array_position(%({terms})s::text[], p.term)]"
        return f"""SELECT p.chunk, sum({weight} * p.impact) AS s FROM retrieval_postings p
                    WHERE {where} AND p.term = ANY(%({terms})s::text[]) GROUP BY p.chunk"""

    # Scores are compared as real (float4): the same words summed in another order agree there.
    whole = f"""SELECT a.chunk, a.s::real AS score FROM ({summed("terms")}) a
                 ORDER BY score DESC, a.chunk LIMIT %(limit)s"""
    if exact or not weights.rare or not weights.common:
        return _positional(f"SELECT e.chunk, e.score, true FROM ({whole}) e", params)

    def completed(alias: str) -> str:  # what the rare words gave the chunk plus its common words
        return f"""({alias}.s + coalesce((
                     SELECT sum(w.idf * c.impact)
                       FROM unnest(%(common)s::text[], %(common_idf)s::float8[]) AS w(term, idf)
                       JOIN retrieval_postings c ON c.chunk = {alias}.chunk AND c.term = w.term), 0))::real"""

    sql = f"""WITH
        bound AS (
            SELECT coalesce(sum(w.idf * (SELECT p.impact FROM retrieval_postings p
                                          WHERE p.tenant_id = %(tenant)s AND p.term = w.term
                                          ORDER BY p.impact DESC LIMIT 1)), 0) AS common
              FROM unnest(%(common)s::text[], %(common_idf)s::float8[]) AS w(term, idf)),
        r AS MATERIALIZED ({summed("rare")}),
        first AS MATERIALIZED (SELECT r.chunk, r.s FROM r ORDER BY r.s DESC, r.chunk LIMIT %(first)s),
        scored AS MATERIALIZED (SELECT f.chunk, {completed("f")} AS score FROM first f),
        theta AS (SELECT (SELECT s.score FROM scored s ORDER BY s.score DESC, s.chunk
                          OFFSET %(limit)s - 1 LIMIT 1) AS v),
        proven AS (SELECT theta.v IS NOT NULL AND bound.common < theta.v - %(slack)s AS yes FROM theta, bound),
        more AS (
            SELECT r.chunk, {completed("r")} AS score FROM r
             WHERE r.s >= (SELECT theta.v FROM theta) - (SELECT bound.common FROM bound) - %(slack)s
               AND NOT EXISTS (SELECT 1 FROM first f WHERE f.chunk = r.chunk))
        (SELECT x.chunk, x.score, true FROM (SELECT * FROM scored UNION ALL SELECT * FROM more) x
          WHERE (SELECT yes FROM proven) ORDER BY x.score DESC, x.chunk LIMIT %(limit)s)
        UNION ALL
        (SELECT e.chunk, e.score, false FROM ({whole}) e WHERE NOT (SELECT yes FROM proven))"""
    return _positional(sql, params)


def text_candidates(
    *,
    tenant: Tenant,
    query: str,
    limit: int,
    acl: list[str] | None,
    cutoff: Any = None,
    exact: bool = False,
) -> list[int]:
    """The readable current chunks text_statement ranks first for any of the query's words (call
    inside the tenant scope). acl=None drops the ACL predicate (the benchmark's baseline); exact=True
    reads every posting of the words (the exact ranking the benchmark compares with)."""
    with connection.cursor() as cursor:
        keys = None if acl is None else readable_acl_keys(cursor, tenant_id=tenant.tenant_id, acl=acl)
        if keys == []:
            return []
        statement = text_arm_statement(
            cursor, tenant=tenant, query=query, keys=keys, limit=limit, cutoff=cutoff, exact=exact
        )
        if statement is None:
            return []
        cursor.execute(*statement)
        return [row[0] for row in cursor.fetchall()]


def text_arm_statement(
    cursor: Any,
    *,
    tenant: Tenant,
    query: str,
    keys: list[UUID] | None,
    limit: int,
    cutoff: Any,
    exact: bool = False,
) -> Statement | None:
    """The text arm as one statement whose top is exact (text_statement), the query's words weighed
    first on `cursor`; None when no current chunk holds any of them."""
    weights = query_weights(cursor, tenant.tenant_id, query_words(query), keys)
    if not weights.rare and not weights.common:
        return None
    return text_statement(
        tenant_id=tenant.tenant_id, weights=weights, keys=keys, limit=limit, cutoff=cutoff, exact=exact
    )
