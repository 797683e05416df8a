"""One keyset pager for every list (API and console): ordered by an indexed key tuple, a page starts
after a cursor with one row comparison, and one extra row says whether more follow. No OFFSET, no COUNT.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from django.db import models
from django.db.models import F, Func, Value
from django.db.models.lookups import GreaterThan, LessThan

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


def keyset_after(
    queryset: models.QuerySet[M],
    *,
    keys: Sequence[str],
    cursor: Sequence[object] | None,
    descending: bool = True,
) -> models.QuerySet[M]:
    """The rows that come after `cursor` in `keys` order, ordered, not yet cut to a page."""
    ordered = keyset_order(queryset, keys=keys, descending=descending)
    if cursor is None:
        return ordered
    if len(cursor) != len(keys):
        raise ValueError(f"a cursor of {len(keys)} values is needed, got {len(cursor)}")
    if len(keys) == 1:
        return ordered.filter(**{f"{keys[0]}__{'lt' if descending else 'gt'}": cursor[0]})
    row = _Row(*(F(key) for key in keys))
    bound = _Row(*(Value(value) for value in cursor))
    return ordered.filter(LessThan(row, bound) if descending else GreaterThan(row, bound))


def keyset_cut(rows: Sequence[M], *, keys: Sequence[str], limit: int) -> KeysetPage[M]:
    """A page from up to `limit + 1` ordered rows: the extra row only says that more follow."""
    kept = list(rows[:limit])
    if len(rows) <= limit or not kept:
        return KeysetPage(kept, None)
    last = kept[-1]
    return KeysetPage(kept, tuple(getattr(last, key) for key in keys))


def keyset_page(
    queryset: models.QuerySet[M],
    *,
    keys: Sequence[str],
    cursor: Sequence[object] | None,
    limit: int,
    descending: bool = True,
) -> KeysetPage[M]:
    """One page of `limit` rows after `cursor` (None: the first page), read as `limit + 1` rows."""
    if limit < 1:
        raise ValueError("a page holds at least one row")
    page = keyset_after(queryset, keys=keys, cursor=cursor, descending=descending)
    return keyset_cut(list(page[: limit + 1]), keys=keys, limit=limit)
