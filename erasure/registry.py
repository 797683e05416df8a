"""The registry: every eraser, named in one setting, and through them every place a subject's data
can be and every column declared free of it.

settings.ERASERS lists the erasers by dotted path, in the order they run (as
AUTHENTICATION_BACKENDS lists Django's): "who erases a run's data?" is answered by reading it. Each
eraser declares the places it answers for (those it erases, and those it only scans, saying what a
person does about them) and the columns of its tables that hold nobody's data. A test fails when a
text column of the database is in neither.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any, ClassVar
from uuid import UUID

from django.conf import settings
from django.core.signals import setting_changed
from django.db import connection
from django.utils.module_loading import import_string

from erasure.matching import Scope
from erasure.places import Place, column_place


@dataclass(frozen=True)
class Free:
    """Columns of one table that never hold a subject's data (ids, digests, statuses, codes), and why."""

    table: str
    why: str
    columns: tuple[str, ...]


def free(table: str, why: str, *columns: str) -> Free:
    return Free(table=table, why=why, columns=columns)


class Eraser:
    """One entry of the registry: the places it answers for, the free columns of its tables, and how
    it finds (collect) and erases (erase) a subject's data there. Both are safe to run again."""

    name: ClassVar[str] = ""
    # Runs after every other eraser, and only once nothing else holds the subject's data: what it
    # keeps (the subject's memory) is what a retry searches the other places for.
    last: ClassVar[bool] = False
    # False for an entry that only declares its tables (nothing of a subject to erase there).
    erases: ClassVar[bool] = True

    def places(self) -> list[Place]:
        return []

    def free(self) -> list[Free]:
        return []

    def collect(self, *, tenant_id: UUID, subject_id: str, subject_digest: str) -> Scope:
        """What this part knows belongs to the subject (runs, texts, keys), before anything is erased."""
        return Scope(tenant_id=tenant_id, subject_id=subject_id)

    def erase(self, *, scope: Scope, request_id: UUID, subject_digest: str) -> dict[str, int]:
        """Delete, redact or key what this part keeps about the subject; counts per store."""
        return {}

    def finished(self, *, tenant_id: UUID, request_id: UUID, clean: bool) -> None:
        """Called inside the transaction that records the request's receipt."""

    def count_key(self, key: str) -> str:
        """How the receipt names one of this eraser's counts."""
        return f"{self.name}.{key}"


@cache
def erasers() -> tuple[Eraser, ...]:
    """The erasers of settings.ERASERS, in order (built once per process)."""
    found = tuple(import_string(path)() for path in settings.ERASERS)
    names = [e.name for e in found]
    if len(set(names)) != len(names) or not all(names):
        raise ValueError(f"ERASERS: every eraser needs a name of its own, got {names}")
    return found


def _settings_changed(*, setting: str, **kwargs: Any) -> None:
    if setting == "ERASERS":
        erasers.cache_clear()
        places.cache_clear()


setting_changed.connect(_settings_changed)


@cache
def places() -> tuple[Place, ...]:
    """Every place of every eraser (named once each)."""
    found: dict[str, Place] = {}
    for eraser in erasers():
        for place in eraser.places():
            if place.name in found:
                raise ValueError(f"place {place.name} is declared twice")
            found[place.name] = place
    return tuple(found.values())


def free_columns() -> dict[tuple[str, str], str]:
    """(table, column) -> why it holds nobody's data."""
    return {(f.table, c): f.why for e in erasers() for f in e.free() for c in f.columns}


def registered_columns() -> set[tuple[str, str]]:
    return {c for place in places() for c in place.columns}


FREE_PREFIX = "declared free: "
FREE_REMEDY = (
    "Keeper declares this column free of personal data, yet it holds the subject's id or text: the "
    "registry is wrong here and nothing erases it; report it to Keeper's maintainers with this receipt"
)
_KINDS = {"text": "text", "character varying": "text", "jsonb": "json", "json": "json", "ARRAY": "array"}


def free_places() -> list[Place]:
    """The declared-free text columns of the tenant's tables, as places searched for the subject's id
    and distinctive texts.

    A declaration is a reviewer's belief, and the scan does not trust it: a match there keeps the
    receipt from saying clean (and marks the declaration wrong, which the tests refuse). Columns of
    tables without a tenant are not the tenant's, and not read."""
    declared = free_columns()
    tables = sorted({table for table, _ in declared})
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT table_name, column_name, data_type FROM information_schema.columns"
            " WHERE table_schema = current_schema() AND table_name = ANY(%s)",
            [tables],
        )
        types = {(t, c): kind for t, c, kind in cursor.fetchall()}
    tenanted = {t for (t, c) in types if c == "tenant_id"}
    found = []
    for (table, column), why in sorted(declared.items()):
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
            remedy=FREE_REMEDY,
        )
        found.append(place)
    return found
