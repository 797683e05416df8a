"""Tenant offboarding: export a whole tenant to a gzipped JSONL file, then erase it with a receipt.

Generic over the schema: every table with a tenant_id column is the tenant's (read from the
catalog, so a new app's table is never forgotten), ordered by its foreign keys; every index whose
predicate names the tenant's id is its own HNSW index; Redis windows are `session:<tenant>:*`.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from graphlib import TopologicalSorter
from pathlib import Path
from typing import Any
from uuid import UUID

from django.conf import settings
from django.db import DatabaseError, IntegrityError, OperationalError, connection, connections
from django.db.backends.utils import CursorWrapper
from django.utils import timezone

from core.artifacts.reclaim import artifacts_erase_tenant, artifacts_tenant_left
from core.artifacts.services import Stored, stored_read
from core.db_router import OWNER_ALIAS
from core.errors import ApplicationError, Conflict, InvalidInput, NotFound
from core.index_builds import index_builds_of
from core.models import ApiKey, OffboardingStatus, StoredArtifact, Tenant, TenantOffboarding
from core.tenancy import tenant_scope

# /2: the tenant's stored blobs follow its rows, one {"artifact": ...} line each (base64).
EXPORT_FORMAT = "keeper.tenant_export/2"
# Columns left out of the export: embeddings (derived, re-computable, large) and search vectors.
OMITTED_TYPES = ("vector", "tsvector")
# Credentials are never exported, though their rows are (a signing secret is shown once, when its
# subscription is made; a key's hash would let whoever holds the file test guesses offline). The rows
# keep their ids, names, prefixes, scopes, URLs and created/revoked dates; a new home makes new keys
# and subscriptions. tests/core/test_offboarding.py fails on a column named like a credential that is
# not listed here.
WITHHELD_COLUMNS = {
    "api_keys": ("secret_sha256",),
    "webhook_subscriptions": ("secret",),
}
# Tables with a tenant_id that are not the tenant's data: the receipts themselves, and the tenant row
# (deleted last, after everything that refers to it).
NOT_TENANT_DATA = ("tenant_offboardings", "tenants")

Progress = Callable[[str], None]


def _quiet(_: str) -> None:
    return None


@dataclass(frozen=True)
class TenantTable:
    name: str
    columns: tuple[str, ...]  # exported columns, in table order
    omitted: tuple[str, ...]  # vector and tsvector columns, and credentials (WITHHELD_COLUMNS)


def tenant_tables() -> list[TenantTable]:
    """Every table that holds a tenant's rows, children before parents (the order to delete in)."""
    with connection.cursor() as cursor:
        cursor.execute(
            """SELECT c.table_name, c.column_name, c.udt_name
                 FROM information_schema.columns c
                 JOIN information_schema.tables t USING (table_schema, table_name)
                WHERE c.table_schema = current_schema() AND t.table_type = 'BASE TABLE'
                  -- a partition's rows are its table's: exported and deleted through it, once
                  AND c.table_name NOT IN (SELECT relname FROM pg_class WHERE relispartition)
                  AND c.table_name IN (SELECT table_name FROM information_schema.columns
                                        WHERE table_schema = current_schema() AND column_name = 'tenant_id')
                ORDER BY c.table_name, c.ordinal_position"""
        )
        rows = cursor.fetchall()
        cursor.execute(
            """SELECT conrelid::regclass::text, confrelid::regclass::text FROM pg_constraint
                WHERE contype = 'f' AND connamespace = current_schema()::regnamespace"""
        )
        references = cursor.fetchall()
    columns: dict[str, list[str]] = {}
    omitted: dict[str, list[str]] = {}
    for table, column, udt in rows:
        if table in NOT_TENANT_DATA:
            continue
        left_out = udt in OMITTED_TYPES or column in WITHHELD_COLUMNS.get(table, ())
        (omitted if left_out else columns).setdefault(table, []).append(column)
        columns.setdefault(table, [])
    # A referenced table is deleted after every table that refers to it.
    graph: dict[str, set[str]] = {table: set() for table in columns}
    for child, parent in references:
        if child in graph and parent in graph and child != parent:
            graph[parent].add(child)
    order = list(TopologicalSorter(graph).static_order())
    return [TenantTable(t, tuple(columns[t]), tuple(omitted.get(t, ()))) for t in order]


def tenant_indexes(*, tenant_id: UUID) -> list[str]:
    """The indexes built for this tenant alone (partial indexes whose predicate names its id)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema() AND indexdef LIKE %s "
            "ORDER BY indexname",
            [f"%'{tenant_id}'::uuid%"],
        )
        return [row[0] for row in cursor.fetchall()]


def _redis() -> Any:
    import redis

    return redis.Redis.from_url(settings.REDIS_URL, socket_timeout=5)


def _session_pattern(tenant_id: UUID) -> str:
    return f"session:{tenant_id}:*"


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, UUID):
        return str(value)
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, bytes | memoryview):
        return bytes(value).hex()
    raise TypeError(f"cannot export {type(value).__name__}")


def _rows(table: TenantTable, tenant_id: UUID) -> Iterator[dict[str, Any]]:
    """The tenant's rows of one table, streamed through a server-side cursor (inside tenant_scope)."""
    if not table.columns:
        return
    cols = ", ".join(f'"{c}"' for c in table.columns)
    sql = f'SELECT {cols} FROM "{table.name}" WHERE tenant_id = %s ORDER BY 1'  # noqa: S608 - catalog names
    raw = connection.connection
    with raw.cursor(name=f"export_{table.name}") as cursor:
        cursor.itersize = 1000
        cursor.execute(sql, [tenant_id])
        for row in cursor:
            yield dict(zip(table.columns, row, strict=True))


def _artifacts(tenant_id: UUID) -> Iterator[dict[str, Any]]:
    """The tenant's stored blobs, read back through the store and checked against their digests (one
    that cannot be read says why instead of its bytes)."""
    with tenant_scope(tenant_id):
        records = list(
            StoredArtifact.objects.filter(tenant_id=tenant_id)
            .order_by("digest")
            .values_list("digest", "store", "key", "size")
        )
    for digest, store, key, size in records:
        item: dict[str, Any] = {"digest": digest, "size": size}
        try:
            item["base64"] = base64.b64encode(stored_read(Stored(digest, store, key, size))).decode()
        except ApplicationError as exc:
            item["error"] = exc.code
        yield item


def tenant_export(
    *, tenant: Tenant, out: Path, requested_by: str, progress: Progress = _quiet
) -> TenantOffboarding:
    """Write every row of the tenant (runs and their events, operations, approvals, summaries,
    LangGraph threads, memory, documents and chunk metadata, audit entries, API key and webhook
    records without their credentials), then its stored blobs (tool results, workspace files), to a
    gzipped JSONL file; record the file's SHA-256 and the counts per table in a kept receipt."""
    tables = list(reversed(tenant_tables()))  # parents first: an import can follow the file's order
    counts: dict[str, int] = {}
    connection.ensure_connection()
    # gzip with mtime 0 and no name: the same data gives the same file, and `sha256sum` checks it.
    with out.open("wb") as raw_file, gzip.GzipFile(fileobj=raw_file, mode="wb", mtime=0, filename="") as gz:

        def write(record: dict[str, Any]) -> None:
            gz.write(
                json.dumps(record, default=_json_default, ensure_ascii=False, sort_keys=True).encode() + b"\n"
            )

        write(
            {
                "format": EXPORT_FORMAT,
                "tenant": {"tenant_id": str(tenant.tenant_id), "slug": tenant.slug, "name": tenant.name},
                "tables": [t.name for t in tables],
                "omitted_columns": {t.name: list(t.omitted) for t in tables if t.omitted},
                "withheld_credentials": {
                    "columns": {t: list(c) for t, c in sorted(WITHHELD_COLUMNS.items())},
                    "why": "API key hashes and webhook signing secrets never leave Keeper; the rows keep "
                    "ids, names, prefixes, scopes, URLs and created/revoked dates. Make new keys and "
                    "webhook subscriptions where the data is imported.",
                },
            }
        )
        with tenant_scope(tenant.tenant_id):
            for table in tables:
                n = 0
                for row in _rows(table, tenant.tenant_id):
                    write({"table": table.name, "row": row})
                    n += 1
                counts[table.name] = n
                progress(f"exported {table.name}: {n} rows")
        n = 0
        for item in _artifacts(tenant.tenant_id):
            write({"artifact": item})
            n += 1
        counts["artifacts"] = n
        progress(f"exported {n} stored artifact(s)")
        write({"end": True, "counts": counts})
    digest = hashlib.sha256(out.read_bytes()).hexdigest()
    receipt = {
        "kind": "export",
        "tenant_id": str(tenant.tenant_id),
        "tenant_slug": tenant.slug,
        "format": EXPORT_FORMAT,
        "file": out.name,
        "sha256": digest,
        "bytes": out.stat().st_size,
        "counts": counts,
        "completed_at": timezone.now().isoformat(),
    }
    return TenantOffboarding.objects.create(
        tenant_id=tenant.tenant_id,
        tenant_slug=tenant.slug,
        status=OffboardingStatus.EXPORTED,
        requested_by=requested_by,
        export_digest=digest,
        receipt=receipt,
        completed_at=timezone.now(),
    )


def _refuse_leased(cursor: CursorWrapper, *, tenant_id: UUID, slug: str) -> None:
    """Conflict if a run of the tenant holds a live lease (a step of it may be calling out)."""
    cursor.execute(
        "SELECT count(*) FROM agent_runs WHERE tenant_id = %s AND lease_owner IS NOT NULL "
        "AND lease_expires_at > now()",
        [tenant_id],
    )
    leased = cursor.fetchone()[0]
    if leased:
        raise Conflict(
            f"{leased} run(s) of tenant {slug} hold a live lease: cancel them or let them finish first",
            code="tenant_runs_leased",
        )


def _save(offboarding: TenantOffboarding, **step: Any) -> None:
    offboarding.progress = {**offboarding.progress, **step}
    TenantOffboarding.objects.filter(pk=offboarding.pk).update(progress=offboarding.progress)


def tenant_scan(*, tenant_id: UUID) -> dict[str, int]:
    """What is left of a tenant, read from every place itself: every table with a tenant_id (rows of
    this tenant), its per-tenant indexes, its Redis windows, its API keys and its tenant row. An
    erased tenant counts 0 everywhere."""
    with connection.cursor() as cursor:
        cursor.execute(
            """SELECT table_name FROM information_schema.columns
                WHERE table_schema = current_schema() AND column_name = 'tenant_id'"""
        )
        with_tenant = {row[0] for row in cursor.fetchall()} - {"tenant_offboardings"}
    found: dict[str, int] = {}
    with tenant_scope(tenant_id), connection.cursor() as cursor:
        for table in sorted(with_tenant):
            cursor.execute(f'SELECT count(*) FROM "{table}" WHERE tenant_id = %s', [tenant_id])  # noqa: S608
            found[f"table.{table}"] = cursor.fetchone()[0]
    found["indexes.per_tenant"] = len(tenant_indexes(tenant_id=tenant_id))
    found["redis.session_windows"] = sum(1 for _ in _redis().scan_iter(match=_session_pattern(tenant_id)))
    return found


def registry_tables_without_tenant() -> list[str]:
    """The erasure registry's tables that carry no tenant_id (staff tables, Django's own): not a
    tenant's data. The registry names every table with a text, JSON or bytes column (a test holds
    it so), so they are read from the schema itself; core knows no app's registry."""
    with connection.cursor() as cursor:
        cursor.execute(
            """SELECT c.table_name FROM information_schema.columns c
                 JOIN information_schema.tables t USING (table_schema, table_name)
                WHERE c.table_schema = current_schema() AND t.table_type = 'BASE TABLE'
                GROUP BY c.table_name
               HAVING bool_or(c.data_type IN ('text', 'character varying', 'character', 'json', 'jsonb', 'bytea')
                              OR (c.data_type = 'ARRAY' AND c.udt_name IN ('_text', '_varchar', '_json', '_jsonb')))
                  AND NOT bool_or(c.column_name = 'tenant_id')"""
        )
        return sorted(row[0] for row in cursor.fetchall())


# The rows' transaction: tries before the erasure stops as failed (erasing again resumes it), and how
# long it waits for a lock a worker holds.
ERASE_TRIES = 3
ERASE_LOCK_TIMEOUT = "10s"


def _erase_rows(*, tenant_id: UUID, slug: str, progress: Progress) -> dict[str, int]:
    """Delete every table's rows of the tenant, children first, and then the tenant row, in one
    transaction; how many rows of each went.

    A worker may be about to move one of the tenant's runs (a retry come due, a timer) while its rows
    go. So the transaction first locks the tenant's runs, then the tenant row: no run of it is taken,
    committed or given an event, and no row naming it is written, until the transaction ends (then the
    writer finds the run or the tenant gone and writes nothing). Under those locks it refuses a run
    holding a live lease (a step may be calling out). A deadlock with such a writer, a lock not had in
    ERASE_LOCK_TIMEOUT, or a row written before the locks were had: everything is rolled back and tried
    again, ERASE_TRIES times in all. All the rows go, or none.
    """
    tables = tenant_tables()
    for attempt in range(1, ERASE_TRIES + 1):
        counts: dict[str, int] = {}
        try:
            with tenant_scope(tenant_id), connection.cursor() as cursor:
                cursor.execute(f"SET LOCAL lock_timeout = '{ERASE_LOCK_TIMEOUT}'")
                cursor.execute(
                    "SELECT run_id FROM agent_runs WHERE tenant_id = %s ORDER BY run_id FOR UPDATE",
                    [tenant_id],
                )
                cursor.execute("SELECT tenant_id FROM tenants WHERE tenant_id = %s FOR UPDATE", [tenant_id])
                _refuse_leased(cursor, tenant_id=tenant_id, slug=slug)
                for table in tables:
                    cursor.execute(f'DELETE FROM "{table.name}" WHERE tenant_id = %s', [tenant_id])  # noqa: S608
                    counts[table.name] = cursor.rowcount
                    progress(f"deleted {table.name}: {cursor.rowcount} rows")
                cursor.execute("DELETE FROM tenants WHERE tenant_id = %s", [tenant_id])
                counts["tenants"] = cursor.rowcount
        except (IntegrityError, OperationalError) as exc:
            if attempt == ERASE_TRIES:
                raise
            progress(f"rolled back ({type(exc).__name__}), nothing deleted; trying again")
            continue
        progress("deleted the tenant row")
        return counts
    raise AssertionError("unreachable")


def tenant_erase(
    *, slug: str, confirm: str, requested_by: str, progress: Progress = _quiet
) -> TenantOffboarding:
    """Erase every row, index and Redis key of a tenant and keep a receipt; idempotent and resumable.

    Refused while a run of the tenant holds a live lease (cancel it, or let it finish, first). A run
    of the command that died or failed midway left its offboarding in status 'erasing' or 'failed' with
    the steps done so far in `progress` (the rows go in one transaction: all or none): the next run
    carries on from there and completes the same receipt.
    """
    if confirm != slug:
        raise InvalidInput("the confirmation must repeat the tenant's slug", code="confirmation_mismatch")
    tenant = Tenant.objects.filter(slug=slug).first()
    if tenant is None:
        done = (
            TenantOffboarding.objects.filter(tenant_slug=slug, status=OffboardingStatus.COMPLETED)
            .order_by("-completed_at")
            .first()
        )
        if done is not None:
            progress(f"tenant {slug} was already erased")
            return done
        raise NotFound(f"no tenant {slug}", code="unknown_tenant")
    tenant_id = tenant.tenant_id
    offboarding = (
        TenantOffboarding.objects.filter(
            tenant_id=tenant_id, status__in=[OffboardingStatus.ERASING, OffboardingStatus.FAILED]
        )
        .order_by("-created_at")
        .first()
    )
    if offboarding is None:
        with tenant_scope(tenant_id), connection.cursor() as cursor:
            _refuse_leased(cursor, tenant_id=tenant_id, slug=slug)
        export = (
            TenantOffboarding.objects.filter(tenant_id=tenant_id, status=OffboardingStatus.EXPORTED)
            .order_by("-created_at")
            .first()
        )
        offboarding = TenantOffboarding.objects.create(
            tenant_id=tenant_id,
            tenant_slug=slug,
            status=OffboardingStatus.ERASING,
            requested_by=requested_by,
            export_digest=export.export_digest if export else "",
            progress={"started_at": timezone.now().isoformat(), "deleted": {}},
        )
        progress(f"offboarding {offboarding.offboarding_id} started")
    else:
        TenantOffboarding.objects.filter(pk=offboarding.pk).update(status=OffboardingStatus.ERASING, error="")
        progress(f"offboarding {offboarding.offboarding_id} resumed")
    rows_gone = False
    try:
        before = tenant_scan(tenant_id=tenant_id) if "before" not in offboarding.progress else None
        if before is not None:
            _save(offboarding, before=before)
        # 1. No key opens the tenant any more.
        with tenant_scope(tenant_id):
            revoked = ApiKey.objects.filter(tenant_id=tenant_id, revoked_at__isnull=True)
            prefixes = sorted(revoked.values_list("prefix", flat=True))
            revoked.update(revoked_at=timezone.now())
        _save(
            offboarding,
            api_keys_revoked=sorted({*offboarding.progress.get("api_keys_revoked", []), *prefixes}),
        )
        progress(f"revoked {len(prefixes)} API key(s)")
        # 2. Its own indexes (built and dropped by the owner role, CONCURRENTLY: no table lock).
        names = tenant_indexes(tenant_id=tenant_id)
        if names:
            if OWNER_ALIAS not in connections.databases:
                raise Conflict(
                    "the tenant's own indexes need the owner role to drop (DATABASE_OWNER_URL)",
                    code="owner_role_needed",
                )
            with connections[OWNER_ALIAS].cursor() as cursor:
                for name in names:
                    cursor.execute(
                        "SELECT tablename FROM pg_indexes WHERE schemaname = current_schema() AND indexname = %s",
                        [name],
                    )
                    table = cursor.fetchone()
                    if table is not None:  # not dropped by an earlier attempt
                        with index_builds_of(cursor, table[0]):
                            cursor.execute(f'DROP INDEX CONCURRENTLY IF EXISTS "{name}"')
                    progress(f"dropped index {name}")
        _save(offboarding, indexes_dropped=sorted({*offboarding.progress.get("indexes_dropped", []), *names}))
        # 3. Its stored blobs, through its records (which go with them), and anything else under its
        # prefix in the store; one another tenant's record also names (stored before keys carried the
        # tenant) is kept for that tenant.
        blobs = artifacts_erase_tenant(tenant_id=tenant_id)
        _save(
            offboarding,
            artifacts_deleted=offboarding.progress.get("artifacts_deleted", 0) + blobs["deleted"],
            artifacts_kept_shared=offboarding.progress.get("artifacts_kept_shared", 0) + blobs["kept_shared"],
        )
        progress(
            f"deleted {blobs['deleted']} stored artifact(s); {blobs['kept_shared']} shared with another tenant kept"
        )
        # 4. Every table, children first, and the tenant row, in one transaction (see _erase_rows).
        counts = _erase_rows(tenant_id=tenant_id, slug=slug, progress=progress)
        rows_gone = True
        deleted = dict(offboarding.progress.get("deleted", {}))
        for table, n in counts.items():
            deleted[table] = deleted.get(table, 0) + n
        _save(offboarding, deleted=deleted)
        # 5. What a worker wrote outside the rows before they went: its Redis session windows, and blobs
        # under its prefix (their records went with the rows).
        client = _redis()
        keys = list(client.scan_iter(match=_session_pattern(tenant_id), count=500))
        if keys:
            client.delete(*keys)
        swept = artifacts_erase_tenant(tenant_id=tenant_id)["deleted"]
        _save(
            offboarding,
            redis_keys_deleted=offboarding.progress.get("redis_keys_deleted", 0) + len(keys),
            artifacts_deleted=offboarding.progress.get("artifacts_deleted", 0) + swept,
        )
        progress(f"deleted {len(keys)} Redis session window(s) and {swept} more stored artifact(s)")
        after = tenant_scan(tenant_id=tenant_id)
        after["artifacts.objects"] = artifacts_tenant_left(tenant_id=tenant_id)
    except Exception as exc:
        TenantOffboarding.objects.filter(pk=offboarding.pk).update(
            status=OffboardingStatus.FAILED, error=repr(exc)[:2000]
        )
        if isinstance(exc, DatabaseError):
            rows = (
                "its rows are gone"
                if rows_gone
                else "its rows are all still there (they go in one transaction)"
            )
            raise Conflict(
                f"the erasure of tenant {slug} stopped ({type(exc).__name__}); {rows}, and erasing again resumes it",
                code="tenant_erase_interrupted",
            ) from exc
        raise
    clean = not any(after.values())
    p = offboarding.progress
    receipt = {
        "kind": "erasure",
        "offboarding_id": str(offboarding.offboarding_id),
        "tenant_id": str(tenant_id),
        "tenant_slug": slug,
        "requested_by": offboarding.requested_by,
        "export_sha256": offboarding.export_digest or None,
        "deleted": p.get("deleted", {}),
        "before": p.get("before", {}),
        "final_scan": after,
        "registry_tables_without_tenant": registry_tables_without_tenant(),
        "indexes_dropped": p.get("indexes_dropped", []),
        "api_keys_revoked": p.get("api_keys_revoked", []),
        "redis_keys_deleted": p.get("redis_keys_deleted", 0),
        "artifacts_deleted": p.get("artifacts_deleted", 0),
        "artifacts_kept_shared": p.get("artifacts_kept_shared", 0),
        "clean": clean,
        "kept": (
            "this receipt, in tenant_offboardings: no foreign key to tenants and no row-level security, "
            "so it outlives the tenant; it holds ids, counts, index names and digests only"
        ),
        "started_at": p.get("started_at"),
        "completed_at": timezone.now().isoformat(),
    }
    left = {k: v for k, v in after.items() if v}
    TenantOffboarding.objects.filter(pk=offboarding.pk).update(
        status=OffboardingStatus.COMPLETED if clean else OffboardingStatus.FAILED,
        receipt=receipt,
        completed_at=timezone.now(),
        error="" if clean else f"left behind: {json.dumps(left, sort_keys=True)}",
    )
    progress("clean" if clean else f"NOT clean: {left}")
    return TenantOffboarding.objects.get(pk=offboarding.pk)
