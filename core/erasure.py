"""The one registry of every place that can hold a subject's data, its erasers, and the columns declared free of it.

core imports no app: each app registers its own places, erasers and personal-data-free columns in
its AppConfig.ready; the memory app's erasure service runs the erasers and scans every place.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol
from uuid import UUID

from django.db import connection

# A value (a message, a note, a memory value) is searched outside the subject's own rows only when it
# is distinctive: at least DISTINCTIVE_CHARS long, or at least DISTINCTIVE_WITH_DIGIT_CHARS long with a
# digit in it ("Baker Street 221b"). "english", "refund please" or "new user message" are not.
DISTINCTIVE_CHARS = 24
DISTINCTIVE_WITH_DIGIT_CHARS = 12
# A subject id this long is searched as a substring tenant-wide; a shorter one ("a") only as a
# whole value (a column equal to it, or a JSON string equal to it): as a substring it is everywhere.
IDENTIFIER_SUBSTRING_CHARS = 6
# Texts shorter than this are not searched at all: one character carries no information on its own,
# but two can be a name (王芳), three too (Ada, Яна).
MIN_VALUE_CHARS = 2
# A text found in a run's free text (a note, a reason, a message) counts as the subject's from this
# length, or from MIN_VALUE_CHARS when it holds a letter outside ASCII ("ok" and "no" are answers, not
# data; 王芳 is a name). What Keeper keeps about the person (memory values, held claims) counts from
# MIN_VALUE_CHARS whatever its script.
FREE_TEXT_MIN_CHARS = 4
# A value shorter than this ("english", "fine", "Ada") is matched only as a whole word, never inside a
# longer word ("refined", "Adam"): the sentence it came from is searched as a value of its own. Scripts
# written without spaces (Chinese, Japanese, Korean) have no words to match whole: a value made of
# their characters is matched inside longer text from MIN_VALUE_CHARS (王芳 in 客户王芳要求退款).
VALUE_SUBSTRING_CHARS = 8
# A machine code ("awaiting_input", "conversation", "delivered"): what a workflow, status or reason
# field holds, nobody's personal data.
CODE = re.compile(r"[a-z][a-z0-9_.:-]*")
_UNSPACED_CHARS = r"\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
_UNSPACED = re.compile(f"[{_UNSPACED_CHARS}]+")


def strings_in(value: Any, *, keys: bool = False) -> list[str]:
    """Every string inside a JSON value (object keys too when `keys`), iteratively: a hostile value
    may be nested deeper than Python recurses."""
    found: list[str] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            found.append(item)
        elif isinstance(item, dict):
            stack.extend([*item.keys(), *item.values()] if keys else item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return found


def free_text_value(text: str) -> bool:
    """Whether a text found in a run's free text is searched as the subject's (see FREE_TEXT_MIN_CHARS)."""
    return len(text) >= FREE_TEXT_MIN_CHARS or (len(text) >= MIN_VALUE_CHARS and not text.isascii())


def matched_inside(text: str) -> bool:
    """Whether a value is matched inside longer text (else only as a whole value)."""
    return len(text) >= VALUE_SUBSTRING_CHARS or (
        len(text) >= MIN_VALUE_CHARS and _UNSPACED.fullmatch(text) is not None
    )


@dataclass(frozen=True)
class Scope:
    """What one erasure covers, collected BEFORE anything is erased (the scan never trusts the erasers)."""

    tenant_id: UUID
    subject_id: str
    run_ids: tuple[UUID, ...] = ()  # the subject's runs, their forks and rewinds
    values: tuple[str, ...] = ()  # texts the request covers: memory values, messages, notes, reasons...
    # Texts that are the subject's in their own rows only, never searched elsewhere: an e-mail address
    # in their run that another customer's run holds too (a cc, a workflow's noreply sender).
    own_values: tuple[str, ...] = ()
    session_keys: tuple[bytes, ...] = ()  # the Redis windows of those runs
    artifact_digests: tuple[str, ...] = ()  # stored blobs only these runs refer to (core.artifacts)


class Eraser(Protocol):
    name: str

    def collect(self, *, tenant_id: UUID, subject_id: str, subject_digest: str) -> Scope:
        """Add to the scope what this app knows belongs to the subject (runs, texts, keys)."""
        ...

    def erase(self, *, scope: Scope, request_id: UUID, subject_digest: str) -> dict[str, int]:
        """Delete or redact what this app keeps about the subject; counts per store."""
        ...


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


LOCATED = 20


@dataclass
class _Registry:
    places: dict[str, Place] = field(default_factory=dict)
    erasers: dict[str, Eraser] = field(default_factory=dict)
    free: dict[tuple[str, str], str] = field(default_factory=dict)  # (table, column) -> why


_REGISTRY = _Registry()


FinishedListener = Callable[..., None]
_FINISHED: list[FinishedListener] = []


def erasure_finished_register(listener: FinishedListener) -> None:
    """Call `listener(tenant_id=, request_id=, clean=)` when an erasure request finishes, inside the
    transaction that records its receipt (runs/webhooks/ writes its outbox rows there)."""
    if listener not in _FINISHED:
        _FINISHED.append(listener)


def erasure_finished_notify(*, tenant_id: UUID, request_id: UUID, clean: bool) -> None:
    for listener in _FINISHED:
        listener(tenant_id=tenant_id, request_id=request_id, clean=clean)


def eraser_register(eraser: Eraser) -> None:
    _REGISTRY.erasers[eraser.name] = eraser


def eraser_unregister(name: str) -> None:
    _REGISTRY.erasers.pop(name, None)


def erasers() -> list[Eraser]:
    return list(_REGISTRY.erasers.values())


def place_register(place: Place) -> None:
    _REGISTRY.places[place.name] = place


def places() -> list[Place]:
    return list(_REGISTRY.places.values())


def free_register(table: str, why: str, *columns: str) -> None:
    """Declare columns that never hold a subject's data (ids, digests, statuses, codes), and why."""
    for column in columns:
        _REGISTRY.free[(table, column)] = why


def free_columns() -> dict[tuple[str, str], str]:
    return dict(_REGISTRY.free)


def registered_columns() -> set[tuple[str, str]]:
    return {c for place in _REGISTRY.places.values() for c in place.columns}


FREE_PREFIX = "declared free: "
_KINDS = {"text": "text", "character varying": "text", "jsonb": "json", "json": "json", "ARRAY": "array"}


def free_places() -> list[Place]:
    """The declared-free columns of the tenant's tables as places searched for the subject's id and
    their distinctive texts (an e-mail address: a principal, a webhook URL or a workflow's description
    can hold one, found from outside).

    A declaration is a reviewer's belief ("staff principals", "document ids"), and a customer's id can
    still end up there (a principal named user:cust-7781, a document ticket-cust-7781, a reason code
    that embeds it): the scan does not trust it. Where such a value can be rewritten, an eraser does
    (retrieval's, the webhooks', LabelsEraser); any match left makes the receipt say where, instead of
    certifying clean. Columns of tables without a tenant are not read."""
    free = free_columns()
    tables = sorted({table for table, _ in free})
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT table_name, column_name, data_type FROM information_schema.columns"
            " WHERE table_schema = current_schema() AND table_name = ANY(%s)",
            [tables],
        )
        types = {(t, c): kind for t, c, kind in cursor.fetchall()}
    tenanted = {t for (t, c) in types if c == "tenant_id"}
    found = []
    for (table, column), why in sorted(free.items()):
        kind = _KINDS.get(types.get((table, column), ""))
        if kind is None or table not in tenanted:
            continue  # ids, numbers and times hold no text; a table without a tenant is not the tenant's
        place = column_place(
            table=table,
            column=column,
            kind=kind,
            tenant_sql="t.tenant_id = %(tenant)s",
            erased_by="",
            what=f"{table}.{column}: {FREE_PREFIX}{why}; searched for the subject's id and distinctive texts",
        )
        found.append(place)
    return found


# --- the generic column scan ------------------------------------------------------------------


# An e-mail address names one person whatever its length ("ivo.brandt@example.com" is 22 characters
# and has no digit: found from outside, it was never searched outside the subject's own rows).
EMAIL = re.compile(r"[^@\s]+@[^@\s]+\.[^@\s]+")


def distinctive(text: str) -> bool:
    return (
        len(text) >= DISTINCTIVE_CHARS
        or (len(text) >= DISTINCTIVE_WITH_DIGIT_CHARS and any(c.isdigit() for c in text))
        or EMAIL.fullmatch(text.strip()) is not None
    )


def holds_subject(text: str, scope: Scope) -> bool:
    """Whether a label or a URL holds the subject's id (a whole token, a short id the whole text) or
    one of their distinctive texts: as the scan of a declared-free column counts it."""
    low = text.lower()
    subject = scope.subject_id
    if len(subject) >= IDENTIFIER_SUBSTRING_CHARS:
        found = id_pattern(subject).search(text) is not None
    else:
        found = low == subject.lower()
    return found or any(v.lower() in low for v in scope.values if distinctive(v))


class LabelsEraser:
    """A staff-made label that names the subject (an API key called key-for-cust-7781, active or
    revoked): nothing else ever rewrites it, so an erasure of that subject could never complete
    (found from outside). The label becomes an erased id; the key keeps working."""

    name = "labels"

    def collect(self, *, tenant_id: UUID, subject_id: str, subject_digest: str) -> Scope:
        return Scope(tenant_id=tenant_id, subject_id=subject_id)

    def erase(self, *, scope: Scope, request_id: UUID, subject_digest: str) -> dict[str, int]:
        from core.tenancy import tenant_scope

        n = 0
        with tenant_scope(scope.tenant_id), connection.cursor() as cursor:
            cursor.execute("SELECT key_id, name FROM api_keys WHERE tenant_id = %s", [scope.tenant_id])
            for key_id, name in cursor.fetchall():
                if holds_subject(name, scope):
                    cursor.execute(
                        "UPDATE api_keys SET name = %s WHERE key_id = %s", [erased_id(name), key_id]
                    )
                    n += 1
        return {"api_keys": n}


def subject_condition(
    column: str, subject_id: str, *, json: bool = False, values: tuple[str, ...] = ()
) -> tuple[str, list[Any]]:
    """The SQL condition (and its parameters) for a column that holds the subject's id, as the scan
    counts it, for an eraser to find the rows it rewrites: a whole token from IDENTIFIER_SUBSTRING_CHARS, else the whole value; or one of their
    distinctive texts (a principal named by the subject's e-mail address)."""
    text = f"{column}::text" if json else column
    params: list[Any]
    if len(subject_id) >= IDENTIFIER_SUBSTRING_CHARS:
        condition, params = f"{text} ~* %s", [id_regex_of(subject_id)]
    elif json:  # the id as a whole JSON string; its % and _ are the id's, not patterns (found from
        # outside: erasing "K_17" deleted the snapshots of a search that found document "K-17")
        condition, params = f"{text} ILIKE %s", [like_pattern('"' + _json_text(subject_id) + '"')]
    else:
        condition, params = f"lower({text}) = lower(%s)", [subject_id]
    likes = [like_pattern(v) for v in values if distinctive(v)]
    if likes:
        condition, params = f"({condition} OR {text} ILIKE ANY(%s))", [*params, likes]
    return condition, params


def erased_id(text: str) -> str:
    """What an id that carried the subject becomes: still unique, no longer readable, and keyed
    (KEEPER_DIGEST_KEY), so a guessed id cannot be tested against it."""
    from core.digests import keyed_digest

    return "erased:" + keyed_digest(text).removeprefix("hmac-sha256:")[:32]


def like_pattern(text: str) -> str:
    return "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def _regex_literal(text: str) -> str:
    """The text as a literal in a PostgreSQL regular expression (a backslash before ASCII punctuation
    is always literal there)."""
    return re.sub(r"([!-/:-@\[-`{-~])", r"\\\1", text)


def id_regex_of(text: str) -> str:
    """A PostgreSQL regular expression for the subject id as a whole token: "cust-100" is found in
    "cust-100:m1" but never inside "cust-1000" (another subject's id). Non-alphanumeric characters
    are escaped (a backslash before one is always literal in PostgreSQL's regular expressions)."""
    return f"(^|[^0-9A-Za-z]){_regex_literal(text)}($|[^0-9A-Za-z])"


def id_pattern(text: str) -> re.Pattern[str]:
    """The same whole-token rule in Python (the redactor must match exactly what the scan counts)."""
    return re.compile(r"(?<![0-9A-Za-z])" + re.escape(text) + r"(?![0-9A-Za-z])", re.IGNORECASE)


def value_regex_of(text: str) -> str:
    """A short value as a whole word of any script ("Ada" in "call Ada back", never in "Adam"; "Яна"
    never in "Янаев"): no letter, digit or underscore on either side, as the database's character
    classes say (Unicode letters under a UTF-8 locale, as Python's), except a character of a script
    written without spaces ("Ada" in 客户Ada要求退款)."""
    edge = f"\\W|[{_UNSPACED_CHARS}]"
    return f"(^|{edge}){_regex_literal(text)}($|{edge})"


def value_pattern(texts: list[str]) -> re.Pattern[str] | None:
    """value_regex_of's rule in Python, for all the texts in one expression (None for none)."""
    if not texts:
        return None
    words = "|".join(re.escape(t) for t in sorted(texts, key=len, reverse=True))
    inside_word = f"[^\\W{_UNSPACED_CHARS}]"  # a letter, digit or underscore of a spaced script
    return re.compile(rf"(?<!{inside_word})(?:{words})(?!{inside_word})", re.IGNORECASE)


def _json_text(text: str) -> str:
    """How a string appears inside jsonb's text form (quotes, backslashes, controls escaped)."""
    return json.dumps(text, ensure_ascii=False)[1:-1]


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
        encode = _json_text if kind == "json" else (lambda s: s)
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
            encoded = _json_text(scope.subject_id) if kind == "json" else scope.subject_id
            id_like, id_regex = [], [id_regex_of(encoded)]
        values_ = [v for v in scope.values if len(v) >= MIN_VALUE_CHARS] if values else []
        own = [v for v in scope.own_values if len(v) >= MIN_VALUE_CHARS] if values else []
        # Long values (and names in scripts without spaces) anywhere inside a text, short ones as words;
        # in the subject's own rows their own-row texts too.
        encode = _json_text if kind == "json" else (lambda s: s)
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
    )
