"""Deleting stored blobs: only when no row of any registered kind refers to them.

Three callers: beat's sweep (blobs nothing names, untouched for KEEPER_ARTIFACT_GRACE), a subject's
erasure (blobs only the subject's runs named) and a tenant's offboarding (all of them). Each deletes an
object while it holds its record's row lock, in the transaction that deletes the record: a put of the
same bytes waits for that transaction, then finds no record and writes the bytes again.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from django.conf import settings
from django.db import connection
from django.db.backends.utils import CursorWrapper

from core.artifacts.references import artifacts_referenced
from core.artifacts.store import ArtifactStore, artifact_store
from core.tenancy import tenant_scope

BATCH = 200  # records per transaction: their objects are deleted while their rows are locked


@dataclass(frozen=True)
class _Row:
    id: int
    digest: str
    store: str
    key: str


def _shared(cursor: CursorWrapper, row: _Row) -> bool:
    """Whether another record (of any tenant) names the same object: only blobs stored before keys
    carried the tenant can be, and those stay until the last record naming them goes."""
    if row.key.count("/") > 1:  # <tenant>/<hh>/<hex>: this tenant's own object
        return False
    cursor.execute("SELECT keeper_artifact_key_shared(%s, %s, %s)", [row.store, row.key, row.id])
    return bool(cursor.fetchone()[0])


def _delete_unreferenced(
    *,
    tenant_id: UUID,
    where: str,
    params: Sequence[Any],
    older_than_s: float,
    except_runs: Iterable[UUID] = (),
    store: ArtifactStore,
) -> tuple[int, list[int]]:
    """Delete the tenant's records matching `where` (and their objects) that no row outside
    `except_runs` names and nobody touched for `older_than_s` seconds; (deleted, ids still named)."""
    runs = list(except_runs)
    with tenant_scope(tenant_id), connection.cursor() as cursor:
        cursor.execute(
            f"""SELECT id, digest, store, key FROM stored_artifacts
                 WHERE tenant_id = %s AND {where}
                   AND touched_at < statement_timestamp() - make_interval(secs => %s)
                 ORDER BY id FOR UPDATE SKIP LOCKED""",  # noqa: S608 - `where` is this module's own
            [tenant_id, *params, older_than_s],
        )
        rows = [_Row(*r) for r in cursor.fetchall()]
        named = artifacts_referenced(tenant_id=tenant_id, digests=[r.digest for r in rows], except_runs=runs)
        # A record of another store (before a move) is left for manage.py artifacts_adopt to carry over.
        gone = [r for r in rows if r.digest not in named and r.store == store.name]
        for row in gone:
            if not _shared(cursor, row):
                store.delete(row.key)  # an error rolls the records back: nothing is reported gone
        cursor.execute(
            "DELETE FROM stored_artifacts WHERE tenant_id = %s AND id = ANY(%s)",
            [tenant_id, [r.id for r in gone]],
        )
        kept = [r.id for r in rows if r.digest in named]
        if kept:
            cursor.execute(
                "UPDATE stored_artifacts SET checked_at = now() WHERE tenant_id = %s AND id = ANY(%s)",
                [tenant_id, kept],
            )
    return len(gone), kept


def artifacts_reclaim(*, limit: int = 1000, store: ArtifactStore | None = None) -> dict[str, int]:
    """Beat's sweep: the records untouched for KEEPER_ARTIFACT_GRACE seconds, those checked longest
    ago first; each one no row of any kind names is deleted with its object."""
    store = store or artifact_store()
    grace = float(settings.KEEPER_ARTIFACT_GRACE)
    with connection.cursor() as cursor:
        cursor.execute("SELECT id, tenant_id FROM keeper_artifacts_reclaimable(%s, %s)", [grace, limit])
        candidates = cursor.fetchall()
    by_tenant: dict[UUID, list[int]] = {}
    for record_id, tenant_id in candidates:
        by_tenant.setdefault(tenant_id, []).append(record_id)
    deleted = kept = 0
    for tenant_id, ids in by_tenant.items():
        for start in range(0, len(ids), BATCH):
            gone, named = _delete_unreferenced(
                tenant_id=tenant_id,
                where="id = ANY(%s)",
                params=[ids[start : start + BATCH]],
                older_than_s=grace,
                store=store,
            )
            deleted, kept = deleted + gone, kept + len(named)
    return {"checked": len(candidates), "deleted": deleted, "in_use": kept}


def artifacts_erase(
    *,
    tenant_id: UUID,
    digests: Iterable[str],
    except_runs: Iterable[UUID],
    store: ArtifactStore | None = None,
) -> int:
    """A subject's erasure: delete these blobs unless a row outside the subject's runs names them
    (the same bytes in another customer's run are that run's too). No grace: the subject's runs are
    stopped before this, and their data must go now."""
    wanted = sorted(set(digests))
    deleted = 0
    for start in range(0, len(wanted), BATCH):
        gone, _ = _delete_unreferenced(
            tenant_id=tenant_id,
            where="digest = ANY(%s)",
            params=[wanted[start : start + BATCH]],
            older_than_s=0,
            except_runs=except_runs,
            store=store or artifact_store(),
        )
        deleted += gone
    return deleted


def artifacts_left(*, tenant_id: UUID, digests: Iterable[str], except_runs: Iterable[UUID]) -> int:
    """How many of these blobs are still stored although no row outside `except_runs` names them
    (what an erasure's scan counts: 0 once the subject's blobs are gone)."""
    wanted = sorted(set(digests))
    if not wanted:
        return 0
    with tenant_scope(tenant_id), connection.cursor() as cursor:
        cursor.execute(
            "SELECT digest FROM stored_artifacts WHERE tenant_id = %s AND digest = ANY(%s)",
            [tenant_id, wanted],
        )
        present = {row[0] for row in cursor.fetchall()}
    return len(present - artifacts_referenced(tenant_id=tenant_id, digests=present, except_runs=except_runs))


def artifacts_erase_tenant(*, tenant_id: UUID, store: ArtifactStore | None = None) -> dict[str, int]:
    """A tenant's offboarding: every record and object of the tenant, and anything else stored under
    its prefix (bytes whose record never committed). An object another tenant's record also names
    (stored before keys carried the tenant) is kept for it."""
    store = store or artifact_store()
    deleted = shared = 0
    while True:
        with tenant_scope(tenant_id), connection.cursor() as cursor:
            cursor.execute(
                "SELECT id, digest, store, key FROM stored_artifacts WHERE tenant_id = %s ORDER BY id LIMIT %s "
                "FOR UPDATE",
                [tenant_id, BATCH],
            )
            rows = [_Row(*r) for r in cursor.fetchall()]
            if not rows:
                break
            for row in rows:
                if row.store != store.name:
                    continue  # nothing this deployment can reach; the record goes all the same
                if _shared(cursor, row):
                    shared += 1
                elif store.delete(row.key):
                    deleted += 1
            cursor.execute(
                "DELETE FROM stored_artifacts WHERE tenant_id = %s AND id = ANY(%s)",
                [tenant_id, [r.id for r in rows]],
            )
    deleted += store.delete_under(f"{tenant_id}/")
    return {"deleted": deleted, "kept_shared": shared}


def artifacts_tenant_left(*, tenant_id: UUID, store: ArtifactStore | None = None) -> int:
    """Objects still under the tenant's prefix (an erased tenant has none)."""
    return len((store or artifact_store()).keys_under(f"{tenant_id}/", limit=1000))
