"""Storing and reading blobs: a record per tenant and digest, bytes in the configured store.

What a caller keeps (in a manifest, an event, a run's state) is a reference by digest and size. Reading
resolves the digest through this tenant's records only: another tenant's digest, or a path or URI found
beside it, is never followed. The bytes read back are checked against the digest.
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from django.conf import settings
from django.db import connection

from core.artifacts.errors import (
    ArtifactMismatch,
    ArtifactMissing,
    ArtifactRefInvalid,
    ArtifactStoreUnavailable,
    ArtifactTooLarge,
    ArtifactUnknown,
)
from core.artifacts.references import artifact_kind_check
from core.artifacts.store import MAX_ARTIFACT_BYTES, ArtifactStore, artifact_key, artifact_store, key_check
from core.models import StoredArtifact
from core.tenancy import tenant_scope

DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
# A value holds at most this many references worth checking (a 256 KiB state holds fewer).
MAX_REFS = 10_000


@dataclass(frozen=True)
class Stored:
    """A tenant's record: which store holds the blob, where, how big."""

    digest: str
    store: str
    key: str
    size: int


def artifact_ref(digest: str, size: int) -> dict[str, Any]:
    """What a caller keeps: the digest and the size, never a location."""
    return {"digest": digest, "size": size}


def artifact_put(
    *, tenant_id: UUID, data: bytes, kind: str, store: ArtifactStore | None = None
) -> dict[str, Any]:
    """Store the bytes for the tenant (once per content) and return the reference to keep."""
    return artifact_put_many(tenant_id=tenant_id, blobs=[data], kind=kind, store=store)[0]


def artifact_put_many(
    *, tenant_id: UUID, blobs: Sequence[bytes], kind: str, store: ArtifactStore | None = None
) -> list[dict[str, Any]]:
    """Store several blobs for the tenant with one statement for their records; a reference each.

    The record is written (or touched) first, then the bytes if the store lacks them: reclaim deletes a
    blob while holding its record's row lock, so a put of the same bytes either waits for it and writes
    them again, or touches the record first and reclaim leaves it for a grace period.
    """
    artifact_kind_check(kind)
    return blobs_store(tenant_id=tenant_id, blobs=blobs, store=store or artifact_store())


def blobs_store(*, tenant_id: UUID, blobs: Sequence[bytes], store: ArtifactStore) -> list[dict[str, Any]]:
    """artifact_put_many's work, for callers that already know a registered kind names the blobs."""
    by_hex: dict[str, bytes] = {}
    refs: list[dict[str, Any]] = []
    for data in blobs:
        if len(data) > MAX_ARTIFACT_BYTES:
            raise ArtifactTooLarge(f"a stored blob is at most {MAX_ARTIFACT_BYTES} bytes, not {len(data)}")
        hexdigest = hashlib.sha256(data).hexdigest()
        by_hex[hexdigest] = data
        refs.append(artifact_ref(f"sha256:{hexdigest}", len(data)))
    if not by_hex:
        return refs
    hexes = sorted(by_hex)
    with tenant_scope(tenant_id), connection.cursor() as cursor:
        cursor.execute(
            """INSERT INTO stored_artifacts (tenant_id, digest, store, key, size, created_at, touched_at)
               SELECT %s, 'sha256:' || h, %s, k, s, now(), now()
                 FROM unnest(%s::text[], %s::text[], %s::bigint[]) AS u(h, k, s)
               ON CONFLICT (tenant_id, digest) DO UPDATE SET touched_at = now()
               RETURNING digest, store, key, (xmax = 0) AS inserted""",
            [
                tenant_id,
                store.name,
                hexes,
                [artifact_key(tenant_id=tenant_id, hexdigest=h) for h in hexes],
                [len(by_hex[h]) for h in hexes],
            ],
        )
        rows = cursor.fetchall()
    moved: list[str] = []
    for digest, held_by, key, inserted in rows:
        hexdigest = digest.removeprefix("sha256:")
        if held_by != store.name:  # recorded in another store (before a move): kept here from now on
            key = artifact_key(tenant_id=tenant_id, hexdigest=hexdigest)
            moved.append(digest)
        if inserted or held_by != store.name or not store.exists(key):
            store.write(key, by_hex[hexdigest])
    if moved:
        with tenant_scope(tenant_id), connection.cursor() as cursor:
            cursor.execute(
                "UPDATE stored_artifacts SET store = %s, key = %s || '/' || substr(digest, 8, 2) || '/' "
                "|| substr(digest, 8) WHERE tenant_id = %s AND digest = ANY(%s)",
                [store.name, str(tenant_id), tenant_id, moved],
            )
    return refs


def artifacts_touch(*, tenant_id: UUID, digests: Sequence[str]) -> int:
    """Mark these blobs as just referenced again (a fork naming its parent's files): the sweep waits a
    grace period from now before it looks at them. How many records there were."""
    wanted = sorted({d for d in digests if DIGEST.fullmatch(d)})
    if not wanted:
        return 0
    with tenant_scope(tenant_id), connection.cursor() as cursor:
        cursor.execute(
            "UPDATE stored_artifacts SET touched_at = now() WHERE tenant_id = %s AND digest = ANY(%s)",
            [tenant_id, wanted],
        )
        return int(cursor.rowcount)


def digest_of(ref: Any) -> str:
    """The digest a reference (or a bare digest) names; InvalidInput if it names none."""
    digest = ref.get("digest") if isinstance(ref, dict) else ref
    if not isinstance(digest, str) or not DIGEST.fullmatch(digest):
        raise ArtifactRefInvalid("an artifact reference names a sha256 digest")
    return digest


def artifacts_stored(*, tenant_id: UUID, digests: Sequence[str]) -> dict[str, Stored]:
    """The tenant's records for these digests (any other digest simply has none)."""
    wanted = sorted({d for d in digests if DIGEST.fullmatch(d)})
    if not wanted:
        return {}
    with tenant_scope(tenant_id):
        rows = StoredArtifact.objects.filter(tenant_id=tenant_id, digest__in=wanted).values_list(
            "digest", "store", "key", "size"
        )
        return {d: Stored(d, s, k, n) for d, s, k, n in rows}


def stored_read(stored: Stored, *, store: ArtifactStore | None = None) -> bytes:
    """A recorded blob's bytes, bounded by its recorded size and checked against its digest."""
    store = store or artifact_store()
    if stored.store != store.name:
        raise ArtifactMissing(
            f"artifact {stored.digest} is kept in the {stored.store!r} store, not in this deployment's "
            f"{store.name!r} (manage.py artifacts_adopt copies it)",
            code="artifact_in_other_store",
        )
    try:
        data = store.read(key_check(stored.key), limit=min(stored.size, MAX_ARTIFACT_BYTES))
    except ArtifactTooLarge:
        raise ArtifactMismatch(f"the stored bytes of {stored.digest} are longer than recorded") from None
    except OSError as exc:  # a disk error, a permission: the store's trouble, not the caller's input
        raise ArtifactStoreUnavailable(
            f"the artifact store could not read {stored.digest}: {exc.strerror}"
        ) from None
    if len(data) != stored.size or "sha256:" + hashlib.sha256(data).hexdigest() != stored.digest:
        raise ArtifactMismatch(f"the stored bytes do not match {stored.digest}")
    return data


def artifact_get(*, tenant_id: UUID, ref: Any, store: ArtifactStore | None = None) -> bytes:
    """The bytes of a blob this tenant stored, by the digest its reference names (nothing else in the
    reference is looked at)."""
    digest = digest_of(ref)
    stored = artifacts_stored(tenant_id=tenant_id, digests=[digest]).get(digest)
    if stored is None:
        raise ArtifactUnknown(f"no artifact {digest} is stored for this tenant")
    return stored_read(stored, store=store)


def artifact_digests_in(value: Any) -> list[str]:
    """The digests of the objects in a JSON value that look like references ({"digest": "sha256:..."}),
    iteratively (a hostile value may nest deeper than Python recurses), in order, each once."""
    found: dict[str, None] = {}
    stack = [value]
    while stack and len(found) < MAX_REFS:
        item = stack.pop()
        if isinstance(item, dict):
            digest = item.get("digest")
            if isinstance(digest, str) and DIGEST.fullmatch(digest):
                found[digest] = None
            stack.extend(reversed(list(item.values())))
        elif isinstance(item, list):
            stack.extend(reversed(item))
    return list(found)


@dataclass(frozen=True)
class ArtifactCheck:
    verified: int  # references this tenant's records resolve, read and checked
    not_stored: int  # digests nothing of this tenant's records names: plain data, never opened


_pool: tuple[int, ThreadPoolExecutor] | None = None
_pool_lock = threading.Lock()
CHECK_THREADS = 2  # per process: a store that never answers holds these, never a request's thread


def _executor() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None or _pool[0] != os.getpid():  # a forked child has no threads behind a pool
            _pool = (
                os.getpid(),
                ThreadPoolExecutor(CHECK_THREADS, thread_name_prefix="keeper-artifact-check"),
            )
        return _pool[1]


class _TimeUp(Exception):
    pass


def _read_all(records: list[Stored], store: ArtifactStore, deadline: float) -> None:
    for stored in records:
        if time.monotonic() > deadline:
            raise _TimeUp  # the caller gives up waiting now, if it has not already
        stored_read(stored, store=store)


def artifacts_check(*, tenant_id: UUID, value: Any, timeout: float | None = None) -> ArtifactCheck:
    """Read back and check every blob a value refers to that this tenant stored, within `timeout`
    seconds (KEEPER_ARTIFACT_TIMEOUT): the reads run on a small pool, so a store that hangs costs the
    caller the time limit and a pool thread, never the caller's thread. Raises the first failure
    (ArtifactMissing, ArtifactMismatch, ArtifactRefused...) or ArtifactStoreUnavailable on time-out.
    """
    limit = float(settings.KEEPER_ARTIFACT_TIMEOUT if timeout is None else timeout)
    digests = artifact_digests_in(value)
    records = artifacts_stored(tenant_id=tenant_id, digests=digests)
    if not records:
        return ArtifactCheck(verified=0, not_stored=len(digests))
    deadline = time.monotonic() + limit
    future = _executor().submit(_read_all, list(records.values()), artifact_store(), deadline)
    try:
        future.result(timeout=limit)
    except (FutureTimeout, _TimeUp):
        future.cancel()
        raise ArtifactStoreUnavailable(
            f"reading back {len(records)} artifact(s) took longer than {limit:g} s "
            "(KEEPER_ARTIFACT_TIMEOUT); the store is slow or stuck",
            code="artifact_check_timeout",
        ) from None
    return ArtifactCheck(verified=len(records), not_stored=len(digests) - len(records))
