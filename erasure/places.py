"""A place a subject's data can be, and the generic place that is one column, counted by one statement.

A place counts what it holds of the subject by reading itself, never from what an eraser reported:
the final scan of a receipt is the sum of these counts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from uuid import UUID

from django.db import connection

from erasure.matching import (
    IDENTIFIER_SUBSTRING_CHARS,
    MIN_VALUE_CHARS,
    Scope,
    distinctive,
    id_regex_of,
    json_text,
    like_pattern,
    matched_inside,
    value_regex_of,
)


@dataclass(frozen=True)
class Place:
    """One place a subject's data can be: a column (JSON paths in `what`), Redis keys, files.

    `count` says how many rows (keys, files) in it hold the subject's id or one of the scope's values;
    it reads the place itself, never what an eraser reported. `erased_by` names the eraser, or says why
    nothing erases it (then a match makes the receipt not clean, which is the point).
    """

    name: str
    what: str
    erased_by: str
    count: Callable[[Scope], int]
    columns: tuple[tuple[str, str], ...] = ()  # the (table, column) pairs this place covers
    # The runs whose rows here hold the subject's data (at most LOCATED of them), for a place in a
    # run's tables: a receipt that is not clean says where to look.
    locate: Callable[[Scope], list[str]] | None = None
    # What a person does when the final scan still finds the subject here, in plain words.
    remedy: str = ""

    def what_to_do(self) -> str:
        if self.remedy:
            return self.remedy
        if self.erased_by:
            return (
                f"the {self.erased_by} eraser did not clear it: retry; if it stays, it is a defect in "
                "Keeper (report it with this receipt)"
            )
        return "nothing erases it: an operator removes it, then retries"


LOCATED = 20


def column_place(
    *,
    table: str,
    column: str,
    kind: str,
    tenant_sql: str,
    erased_by: str,
    what: str = "",
    mine_sql: str | None = None,
    owner_sql: str | None = None,
    values: bool = True,
    run_sql: str | None = None,
    remedy: str = "",
) -> Place:
    """A place that is one column, counted with one SQL statement (run_sql: the row's run id, for a
    run's tables, so the runs still holding data can be named).

    kind: "text", "json" or "array" (text[]). tenant_sql: the condition that keeps the tenant's rows
    (on alias t; %(tenant)s, %(runs)s and %(subject)s are available). mine_sql: the row is the
    subject's (one of the scope's runs, the subject's memory): every value is searched there.
    owner_sql: the subject the row belongs to ('' or NULL for nobody): distinctive values are searched
    in rows nobody (or this subject) owns, never in another subject's rows. The identifier is searched
    in every row of the tenant. values=False: the identifier only (e.g. documents the company wrote).
    """
    as_text = {
        "text": f"t.{column}",
        "json": f"t.{column}::text",
        "array": f"array_to_string(t.{column}, ' ')",
    }[kind]
    in_runs = f"({mine_sql})" if mine_sql else "FALSE"
    unowned = (
        f"COALESCE(({owner_sql}), '') IN ('', %(subject)s) OR ({owner_sql}) LIKE 'erased:%%'"
        if owner_sql
        else "TRUE"
    )
    rows = f"""
          FROM {table} t
         WHERE ({tenant_sql}) AND (
               {as_text} ~* ANY(%(id_regex)s) OR {as_text} ILIKE ANY(%(id_like)s)
            OR lower({as_text}) = ANY(%(id_exact)s)
            OR ({in_runs} AND ({as_text} ILIKE ANY(%(value_like)s) OR {as_text} ~* ANY(%(value_words)s)))
            OR (({unowned}) AND {as_text} ILIKE ANY(%(distinct_like)s)))
    """  # noqa: S608 - table and column names come from the registry, values are parameters

    def patterns(texts: list[str], inside: Callable[[str], bool]) -> tuple[list[str], list[str]]:
        """(ILIKE patterns, whole values): a short text matches only a whole value (a column equal to
        it, a JSON string equal to it), never a part of a longer word."""
        encode = json_text if kind == "json" else (lambda s: s)
        like = [like_pattern(encode(t)) for t in texts if inside(t)]
        short = [t for t in texts if not inside(t)]
        if kind == "json":
            return like + [like_pattern('"' + encode(t) + '"') for t in short], []
        return like, [t.lower() for t in short]

    # The column that names whose row it is holds whole subject ids: "cust-1001-x.2" is another
    # subject there, not the token "cust-1001-x" followed by ".2" (as it could be inside a text).
    owner_column = owner_sql == f"t.{column}"

    def matched(scope: Scope) -> dict[str, UUID | str | list[str] | list[UUID]]:
        id_like, id_exact = patterns([scope.subject_id], lambda t: len(t) >= IDENTIFIER_SUBSTRING_CHARS)
        id_regex: list[str] = []
        if owner_column:
            id_like, id_exact = [], [scope.subject_id.lower()]
        elif len(scope.subject_id) >= IDENTIFIER_SUBSTRING_CHARS:  # a whole token, not any substring
            encoded = json_text(scope.subject_id) if kind == "json" else scope.subject_id
            id_like, id_regex = [], [id_regex_of(encoded)]
        values_ = [v for v in scope.values if len(v) >= MIN_VALUE_CHARS] if values else []
        own = [v for v in scope.own_values if len(v) >= MIN_VALUE_CHARS] if values else []
        # Long values (and names in scripts without spaces) anywhere inside a text, short ones as words;
        # in the subject's own rows their own-row texts too.
        encode = json_text if kind == "json" else (lambda s: s)
        value_like = [like_pattern(encode(v)) for v in values_ + own if matched_inside(v)]
        value_words = [value_regex_of(encode(v)) for v in values_ + own if not matched_inside(v)]
        params: dict[str, UUID | str | list[str] | list[UUID]] = {
            "tenant": scope.tenant_id,
            "runs": list(scope.run_ids),
            "subject": scope.subject_id,
            "id_like": id_like,
            "id_regex": id_regex,
            "id_exact": id_exact,
            "value_like": value_like,
            "value_words": value_words,
            "distinct_like": patterns([v for v in values_ if distinctive(v)], lambda _: True)[0],
        }
        return params

    def count(scope: Scope) -> int:
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT count(*) {rows}", matched(scope))
            return int(cursor.fetchone()[0])

    def locate(scope: Scope) -> list[str]:
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT DISTINCT ({run_sql})::text {rows} ORDER BY 1 LIMIT {LOCATED}", matched(scope)
            )
            return [row[0] for row in cursor.fetchall()]

    return Place(
        name=f"{table}.{column}",
        what=what or f"{table}.{column}",
        erased_by=erased_by,
        count=count,
        columns=((table, column),),
        locate=locate if run_sql else None,
        remedy=remedy,
    )
