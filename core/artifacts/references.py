"""Every kind of row that refers to a stored blob, named in one registry: what reclaim and erasure ask.

A part of Keeper that stores through core.artifacts registers its kind here (in its AppConfig.ready)
with the SQL that finds the digests its rows name; artifact_put refuses a kind nobody registered, so
nothing can store a blob that reclaim would not know is in use. core imports no app: the SQL comes
from the app that owns the rows.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from django.db import connection

from core.tenancy import tenant_scope


@dataclass(frozen=True)
class ReferencePlace:
    """`sql` is a SELECT of one text column: every digest the tenant's rows of this kind name
    (NULLs allowed). Parameters: %(tenant)s, the tenant's id (filter it in the WHERE as well as through
    row-level security), and %(except_runs)s, a uuid[] of runs whose rows do not count (an erasure
    asks what the subject's runs alone held)."""

    kind: str
    what: str
    sql: str


_places: dict[str, ReferencePlace] = {}


def artifact_references_register(place: ReferencePlace) -> None:
    _places[place.kind] = place


def artifact_reference_places() -> list[ReferencePlace]:
    return list(_places.values())


def artifact_kind_check(kind: str) -> None:
    if kind not in _places:
        raise ValueError(
            f"artifact kind {kind!r} has no registered references (core.artifacts.references): reclaim "
            "could not tell when its blobs are in use"
        )


def artifacts_referenced(
    *, tenant_id: UUID, digests: Iterable[str], except_runs: Iterable[UUID] = ()
) -> set[str]:
    """The digests among `digests` that some row of the tenant (outside `except_runs`) names."""
    wanted = sorted(set(digests))
    if not wanted:
        return set()
    params: dict[str, Any] = {"tenant": tenant_id, "except_runs": list(except_runs), "digests": wanted}
    found: set[str] = set()
    with tenant_scope(tenant_id), connection.cursor() as cursor:
        for place in _places.values():
            cursor.execute(
                f"SELECT DISTINCT d FROM ({place.sql}) AS refs(d) WHERE d = ANY(%(digests)s::text[])",  # noqa: S608
                params,
            )
            found.update(row[0] for row in cursor.fetchall())
    return found


def artifacts_referenced_all(*, tenant_id: UUID) -> set[str]:
    """Every digest some row of the tenant names (adopting blobs stored before the records)."""
    params: dict[str, Any] = {"tenant": tenant_id, "except_runs": []}
    found: set[str] = set()
    with tenant_scope(tenant_id), connection.cursor() as cursor:
        for place in _places.values():
            cursor.execute(f"SELECT DISTINCT d FROM ({place.sql}) AS refs(d) WHERE d IS NOT NULL", params)  # noqa: S608
            found.update(row[0] for row in cursor.fetchall())
    return found
