"""Sortable column headers of the server-side sorted lists (the run list, the audit log): each a link
to its own order, or to the other direction when the list is in that order already."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class SortHeader:
    label: str
    query: str  # the query string of the link: the filters, the column's order, no page cursor
    aria: str  # aria-sort of the header in the list's order now ("ascending"/"descending"), else ""
    arrow: str  # what the eye sees beside the label: ↑ going up, ↓ going down

    @property
    def title(self) -> str:
        return f"sort by {self.label}" + (", the other way" if self.aria else "")


def sort_headers(
    *,
    order: str,
    sorts: Mapping[str, tuple[str, str]],
    descending: Callable[[str], bool],
    link: Callable[[str], str],
    labels: Mapping[str, str] | None = None,
) -> dict[str, SortHeader]:
    """One header per sortable column: `sorts` maps a column to its first order and its reverse,
    `descending(order)` says which way an order goes, `link(order)` makes the header's query string."""
    headers: dict[str, SortHeader] = {}
    for column, (first, again) in sorts.items():
        current = order in (first, again)
        aria = ("descending" if descending(order) else "ascending") if current else ""
        headers[column] = SortHeader(
            label=(labels or {}).get(column, column.replace("_", " ")),
            query=link(again if order == first else first),
            aria=aria,
            arrow={"descending": "↓", "ascending": "↑"}.get(aria, ""),
        )
    return headers
