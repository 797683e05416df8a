"""What a request covers, and the scan that counts every place for it, read directly.

The scope is collected before anything is erased (from every eraser: the subject's runs, the texts of
their memory, messages, notes and reasons); every place is counted with it before and after, so a
receipt never repeats what an eraser believes.
"""

from __future__ import annotations

from uuid import UUID

from core.digests import subject_digest
from core.tenancy import tenant_scope
from erasure.matching import Scope
from erasure.places import Place
from erasure.registry import erasers, free_places, places


def scope_collect(*, tenant_id: UUID, subject_id: str, subject_digest: str) -> Scope:
    """Everything the request covers, merged from every eraser."""
    run_ids: set[UUID] = set()
    values: set[str] = set()
    keys: set[bytes] = set()
    digests: set[str] = set()
    own: set[str] = set()
    for eraser in erasers():
        found = eraser.collect(tenant_id=tenant_id, subject_id=subject_id, subject_digest=subject_digest)
        run_ids.update(found.run_ids)
        values.update(found.values)
        own.update(found.own_values)
        keys.update(found.session_keys)
        digests.update(found.artifact_digests)
    return Scope(
        tenant_id=tenant_id,
        subject_id=subject_id,
        run_ids=tuple(sorted(run_ids)),
        values=tuple(sorted(values)),
        own_values=tuple(sorted(own - values)),
        session_keys=tuple(sorted(keys)),
        artifact_digests=tuple(sorted(digests)),
    )


def scan(scope: Scope, scanned: list[Place]) -> dict[str, int]:
    """Count every place, read directly (the same scope before and after erasure)."""
    with tenant_scope(scope.tenant_id):
        return {place.name: place.count(scope) for place in scanned}


def runs_holding(scope: Scope, held: list[Place]) -> dict[str, list[str]]:
    """The runs whose rows in each of these places still hold the subject's data (read directly)."""
    with tenant_scope(scope.tenant_id):
        return {p.name: p.locate(scope) for p in held if p.locate is not None}


def subject_places(*, tenant_id: UUID, subject_id: str) -> dict[str, int | None]:
    """Every registered place that holds the subject's id or text now, with its count, as the next
    erasure's receipt would count it before erasing (None: the place could not be read)."""
    scope = scope_collect(
        tenant_id=tenant_id,
        subject_id=subject_id,
        subject_digest=subject_digest(tenant_id=tenant_id, subject_id=subject_id),
    )
    found: dict[str, int | None] = {}
    free = free_places()
    with tenant_scope(tenant_id):
        for place in [*places(), *free]:
            try:
                found[place.name] = place.count(scope)
            except Exception:  # Redis away: the page says "unavailable", it does not fail
                found[place.name] = None
            if place in free and found[place.name] == 0:
                del found[place.name]  # a declared-free column is listed only where it holds them
    return found
