"""One keyset pager for every list (API and console): ordered by an indexed key tuple, a page starts
after a cursor with one row comparison, and one extra row says whether more follow. No OFFSET, no COUNT.

A list sorted by a column that may be NULL sorts its NULLs as PostgreSQL's btree does: as the greatest
value, so last going up and first going down (an index on the column serves both directions).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Generic, Literal, TypeVar
from uuid import UUID

from django.db import models
from django.db.models import F, Func, Q, Value
from django.db.models.lookups import GreaterThan, LessThan
from django.utils.dateparse import parse_datetime

M = TypeVar("M", bound=models.Model)


@dataclass(frozen=True)
class KeysetPage(Generic[M]):
    rows: list[M]
    # The key values of the last row when more rows follow (pass it back as the next cursor), else None.
    next_cursor: tuple[object, ...] | None

    @property
    def more(self) -> bool:
        return self.next_cursor is not None


class _Row(Func):
    """`ROW(a, b, ...)`: Postgres compares row constructors left to right, as a btree on (a, b, ...)
    orders them, so `ROW(a, b) < ROW(x, y)` is one index range condition."""

    function = "ROW"
    output_field = models.Field()


def keyset_order(
    queryset: models.QuerySet[M], *, keys: Sequence[str], descending: bool = True
) -> models.QuerySet[M]:
    """The queryset ordered by `keys`, all in one direction (an index on the same tuple serves it)."""
    return queryset.order_by(*(f"-{key}" if descending else key for key in keys))


def _beyond(keys: Sequence[str], cursor: Sequence[object], descending: bool) -> Q:
    """Rows strictly past `cursor` in `keys` order, as one row comparison (one index range)."""
    if len(keys) == 1:
        return Q(**{f"{keys[0]}__{'lt' if descending else 'gt'}": cursor[0]})
    row = _Row(*(F(key) for key in keys))
    bound = _Row(*(Value(value) for value in cursor))
    return Q(LessThan(row, bound) if descending else GreaterThan(row, bound))


def keyset_after(
    queryset: models.QuerySet[M],
    *,
    keys: Sequence[str],
    cursor: Sequence[object] | None,
    descending: bool = True,
    nullable: bool = False,
) -> models.QuerySet[M]:
    """The rows that come after `cursor` in `keys` order, ordered, not yet cut to a page.

    `nullable`: the first key may be NULL (the others never are). A row comparison with a NULL in it
    is NULL, neither before nor after, so the NULL rows get their own condition: they follow every
    value going up and precede every value going down, ordered among themselves by the other keys."""
    ordered = keyset_order(queryset, keys=keys, descending=descending)
    if cursor is None:
        return ordered
    if len(cursor) != len(keys):
        raise ValueError(f"a cursor of {len(keys)} values is needed, got {len(cursor)}")
    if not nullable:
        return ordered.filter(_beyond(keys, cursor, descending))
    first, rest = keys[0], keys[1:]
    if cursor[0] is None:
        among_nulls = Q(**{f"{first}__isnull": True}) & _beyond(rest, cursor[1:], descending)
        # Going down the NULLs came first: every row with a value is still to come.
        return ordered.filter(among_nulls | Q(**{f"{first}__isnull": False}) if descending else among_nulls)
    beyond = _beyond(keys, cursor, descending)
    # Going up the NULLs come last, after every value.
    return ordered.filter(beyond if descending else beyond | Q(**{f"{first}__isnull": True}))


def keyset_cut(rows: Sequence[M], *, keys: Sequence[str], limit: int) -> KeysetPage[M]:
    """A page from up to `limit + 1` ordered rows: the extra row only says that more follow."""
    kept = list(rows[:limit])
    if len(rows) <= limit or not kept:
        return KeysetPage(kept, None)
    last = kept[-1]
    return KeysetPage(kept, tuple(getattr(last, key) for key in keys))


CursorKind = Literal["time", "text", "int"]


@dataclass(frozen=True)
class ListOrder:
    """One order of a list: a column, then any columns that order its ties (`then`, never NULL), then
    the row's id to break the rest, all one way, so that a page starts after its cursor (the last
    row's key values) with one row comparison."""

    column: str
    descending: bool
    kind: CursorKind  # the column's type, as its cursor carries it
    tie: str  # the id column: unique and never NULL
    tie_kind: Literal["u", "i"] = "u"  # a UUID or an integer
    nullable: bool = False  # NULLs sort last going up, first going down
    then: tuple[tuple[str, CursorKind], ...] = ()  # (column, its type) between the column and the id

    @property
    def keys(self) -> tuple[str, ...]:
        return (self.column, *(column for column, _ in self.then), self.tie)

    def encode(self, name: str, cursor: Sequence[object]) -> str:
        """A page's cursor (the last row's key values) as the token a link carries."""
        return cursor_encode(name, cursor)

    def decode(self, name: str, token: str) -> tuple[object, ...]:
        """The key values of a token this order (named `name`) made; `CursorInvalid` otherwise."""
        kinds = [self.kind, *(kind for _, kind in self.then)]
        return cursor_decode(token, order=name, kinds=kinds, nullable=self.nullable, last=self.tie_kind)


def list_orders(
    name: str,
    column: str,
    kind: CursorKind,
    *,
    tie: str,
    tie_kind: Literal["u", "i"] = "u",
    newest_first: bool = False,
    nullable: bool = False,
    then: tuple[tuple[str, CursorKind], ...] = (),
) -> dict[str, ListOrder]:
    """`name` in the column's natural direction (times newest first, text A to Z) and the reverse,
    named `<name>_asc` or `<name>_desc`."""
    other = f"{name}_asc" if newest_first else f"{name}_desc"
    return {
        name: ListOrder(column, newest_first, kind, tie, tie_kind, nullable, then),
        other: ListOrder(column, not newest_first, kind, tie, tie_kind, nullable, then),
    }


class CursorInvalid(ValueError):
    """A page cursor that was not made for this list's order (edited, cut, or from another order)."""


def cursor_encode(order: str, values: Sequence[object]) -> str:
    """A page cursor as one URL-safe token: the order it belongs to and its key values, each tagged
    with its type so that text, NULL, a time (to the microsecond, with its offset), an integer and a
    UUID come back as they went."""
    tagged: list[object] = []
    for value in values:
        if value is None:
            tagged.append(None)
        elif isinstance(value, datetime):
            tagged.append({"t": value.isoformat()})
        elif isinstance(value, UUID):
            tagged.append({"u": str(value)})
        elif isinstance(value, bool) or not isinstance(value, (str, int)):
            raise TypeError(f"a cursor cannot hold a {type(value).__name__}")
        else:
            tagged.append({"s": value} if isinstance(value, str) else {"i": value})
    raw = json.dumps([order, tagged], separators=(",", ":"), ensure_ascii=False).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


_TAGS = {"time": "t", "text": "s", "int": "i"}


def cursor_decode(
    token: str, *, order: str, kinds: Sequence[CursorKind], nullable: bool = False, last: str = "u"
) -> tuple[object, ...]:
    """The key values of a cursor made by `cursor_encode` for `order`: one of each type in `kinds`
    (the first may be NULL when `nullable`), then the tie-breaker (`last`: "u" a UUID, "i" an integer).
    Anything else is `CursorInvalid` with a reason a person can act on."""
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        decoded = json.loads(raw)
    except (binascii.Error, ValueError) as exc:
        raise CursorInvalid("the page cursor is not one this list made (start from the first page)") from exc
    if not (isinstance(decoded, list) and len(decoded) == 2 and isinstance(decoded[1], list)):
        raise CursorInvalid("the page cursor is not one this list made (start from the first page)")
    made_for, tagged = decoded
    if made_for != order:
        raise CursorInvalid(f"the page cursor belongs to another order ({str(made_for)[:40]}), not {order}")
    if len(tagged) != len(kinds) + 1:
        raise CursorInvalid("the page cursor has the wrong number of values")
    tags = [_TAGS[kind] for kind in kinds] + [last]
    values: list[object] = []
    for position, (tag, item) in enumerate(zip(tags, tagged, strict=True)):
        if item is None and nullable and position == 0:
            values.append(None)
            continue
        if not (isinstance(item, dict) and list(item) == [tag]):
            raise CursorInvalid("the page cursor's values do not fit this order")
        values.append(_cursor_value(tag, item[tag]))
    return tuple(values)


def _cursor_value(tag: str, value: object) -> object:
    bad = CursorInvalid("the page cursor's values do not fit this order")
    if tag == "s":
        if not isinstance(value, str) or len(value) > 1000 or "\x00" in value:
            raise bad
        return value
    if tag == "i":
        if isinstance(value, bool) or not isinstance(value, int) or not -(2**63) <= value < 2**63:
            raise bad
        return value
    if not isinstance(value, str):
        raise bad
    if tag == "u":
        try:
            return UUID(value)
        except ValueError as exc:
            raise bad from exc
    try:
        parsed = parse_datetime(value)
    except ValueError as exc:
        raise bad from exc
    if parsed is None or parsed.tzinfo is None:
        raise bad
    return parsed


def keyset_page(
    queryset: models.QuerySet[M],
    *,
    keys: Sequence[str],
    cursor: Sequence[object] | None,
    limit: int,
    descending: bool = True,
    nullable: bool = False,
) -> KeysetPage[M]:
    """One page of `limit` rows after `cursor` (None: the first page), read as `limit + 1` rows."""
    if limit < 1:
        raise ValueError("a page holds at least one row")
    page = keyset_after(queryset, keys=keys, cursor=cursor, descending=descending, nullable=nullable)
    return keyset_cut(list(page[: limit + 1]), keys=keys, limit=limit)
