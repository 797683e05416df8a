"""Erasure of a subject across every store, with tombstones and a receipt that proves it.

Memory items and their vectors are deleted; tombstones keep digests only, so replaying old events
or re-running extraction cannot bring a claim back; every registered eraser (runs: conversation
text, summaries, session windows) runs; a final scan of every store must find nothing. Running it
twice is safe. The receipt names the subject by digest, never in clear.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any
from uuid import UUID

from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from core.digests import canonical_json, json_digest, keyed_digest
from core.erasure import (
    CODE,
    FREE_TEXT_MIN_CHARS,
    LOCATED,
    MIN_VALUE_CHARS,
    Place,
    Scope,
    column_place,
    erasers,
    erasure_finished_notify,
    free_places,
    free_register,
    place_register,
    places,
    strings_in,
)
from core.errors import InvalidInput, NotFound
from core.models import Tenant
from core.tasks import task_send
from core.tenancy import tenant_scope
from memory.models import ErasureRequest, ErasureStatus, MemoryItem, MemoryVector, Tombstone

ERASE_TASK = "workers.tasks.execute_erasure"


# Keyed (KEEPER_DIGEST_KEY): receipts, tombstones, erased runs and the audit log name a subject by
# these, and an unkeyed hash of a guessable id could be recomputed by anyone who reads the database.
# Records made before the key kept unkeyed sha256 digests; lookups try both (`*_digests`).


def subject_digest(*, tenant_id: UUID, subject_id: str) -> str:
    return keyed_digest({"tenant": str(tenant_id), "subject": subject_id})


def subject_digests(*, tenant_id: UUID, subject_id: str) -> list[str]:
    """The subject's digest, then the unkeyed one older records carry."""
    value = {"tenant": str(tenant_id), "subject": subject_id}
    return [keyed_digest(value), json_digest(value)]


def _claim_value(*, subject_id: str, namespace: str, key: str, value: Any) -> dict[str, Any]:
    return {"subject": subject_id, "namespace": namespace, "key": key, "value": value}


def _source_value(*, subject_id: str, run_id: Any, event_seq: Any) -> dict[str, Any]:
    return {"subject": subject_id, "run_id": str(run_id), "event_seq": event_seq}


def claim_digest(*, subject_id: str, namespace: str, key: str, value: Any) -> str:
    return keyed_digest(_claim_value(subject_id=subject_id, namespace=namespace, key=key, value=value))


def source_digest(*, subject_id: str, run_id: Any, event_seq: Any) -> str:
    return keyed_digest(_source_value(subject_id=subject_id, run_id=run_id, event_seq=event_seq))


def erasure_request_create(*, tenant: Tenant, subject_id: str, requested_by: str) -> ErasureRequest:
    """Record the request and hand it to a worker (it runs as a Celery task with progress).

    While a request for the same subject is still pending or running, that request is the answer
    (found from outside: six clicks made six requests), handed to a worker again in case the broker
    lost it or its worker died (erasure is idempotent, and each run is erased under its row's lock)."""
    if not isinstance(subject_id, str) or not 0 < len(subject_id) <= 200:
        raise InvalidInput("subject_id must be 1 to 200 characters", code="invalid_subject")
    digest = subject_digest(tenant_id=tenant.tenant_id, subject_id=subject_id)
    with tenant_scope(tenant.tenant_id):
        with connection.cursor() as cursor:  # two requests for one subject at once: one goes first
            cursor.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", [f"erasure:{digest}"])
        request = (
            ErasureRequest.objects.filter(
                subject_digest=digest, status__in=[ErasureStatus.PENDING, ErasureStatus.RUNNING]
            )
            .order_by("created_at")
            .first()
        )
        if request is None:
            request = ErasureRequest.objects.create(
                tenant=tenant, subject_id=subject_id, requested_by=requested_by, subject_digest=digest
            )
        # If the broker is away the request stays pending, visibly; asking again sends it again.
        transaction.on_commit(
            lambda: task_send(name=ERASE_TASK, args=[str(request.request_id), str(tenant.tenant_id)])
        )
    return request


def _progress(request: ErasureRequest, **step: Any) -> None:
    request.progress = {**request.progress, **step}
    ErasureRequest.objects.filter(pk=request.pk).update(
        progress=request.progress, status=ErasureStatus.RUNNING
    )


REMANENCE = (
    "Physical remanence is outside an application's reach: PostgreSQL keeps dead row versions until VACUUM "
    "and sampled values in its planner statistics until ANALYZE, and WAL, replicas and backups keep old pages "
    "until they expire, as Redis snapshots (RDB/AOF) keep deleted keys until the next rewrite (asked for "
    "after deleting session windows; a managed Redis may only rewrite on its schedule); the operator "
    "runs VACUUM ANALYZE on the erased tables and lets backups age out "
    "within the retention period the erasure policy promises."
)


def erasure_execute(*, tenant_id: UUID, request_id: UUID) -> ErasureRequest:
    """Erase the request's subject everywhere; idempotent. Raises (and records) a store's error:
    a failure of one store is never swallowed into a receipt that claims success.

    What the request covers (the subject's runs, the texts of its memory, messages, notes and
    reasons) is collected before anything is erased; every registered place is counted before and
    after, by reading the place itself, so the receipt never repeats what an eraser believes.
    """
    with tenant_scope(tenant_id):
        request = ErasureRequest.objects.filter(request_id=request_id).first()
    if request is None:
        raise NotFound(f"no erasure request {request_id}", code="erasure_request_not_found")
    if request.status == ErasureStatus.COMPLETED:
        return request  # done: the receipt stands, and the subject's id is no longer kept to redo it
    subject = request.subject_id
    scope: Scope | None = None
    try:
        scope = _collect(tenant_id=tenant_id, subject_id=subject, subject_digest=request.subject_digest)
        # A retry searches again for what every earlier attempt searched for (it erased some of it).
        kept = {
            v for r in [request, *_requests_of(tenant_id, request)] for v in r.searched if isinstance(v, str)
        }
        scope = replace(scope, values=tuple(sorted(set(scope.values) | kept)))
        free = free_places()
        scanned = [*places(), *free]
        before = _scan(scope, scanned)
        counts: dict[str, int] = {}
        for eraser in erasers():
            erased = eraser.erase(
                scope=scope, request_id=request.request_id, subject_digest=request.subject_digest
            )
            counts.update({f"{eraser.name}.{k}": v for k, v in erased.items()})
            with tenant_scope(tenant_id):
                _progress(request, **{eraser.name: erased})
        # The subject's memory last, and only once nothing else holds their data: a failed erasure
        # keeps the facts it searches the other stores for, so a retry searches for them again
        # (deleting them first made a retry certify clean a copy the first attempt could not erase).
        kept_places = _memory_places()
        after = _scan(scope, scanned)
        if not any(n for name, n in after.items() if name not in kept_places):
            counts.update(_erase_memory(request=request, tenant_id=tenant_id, subject=subject))
            after = _scan(scope, scanned)  # else nothing changed since: that scan is the final one
    except Exception as exc:
        # An eraser that raised may have erased texts already: the request keeps what it searched for,
        # as a request that ends with data left behind does, so the retry looks for them again.
        searched = {"searched": list(scope.values)} if scope is not None else {}
        with tenant_scope(tenant_id):
            ErasureRequest.objects.filter(pk=request.pk).update(
                status=ErasureStatus.FAILED, error=repr(exc)[:2000], **searched
            )
        raise
    clean = not any(after.values())
    # Where a run's rows still hold the subject's data (a run without the subject whose input named
    # them, say), which runs: found from outside, a receipt that said only "agent_runs.state 1" left a
    # compliance officer nowhere to look.
    held = _runs_holding(scope, [p for p in scanned if after[p.name]]) if not clean else {}
    receipt = {
        "request_id": str(request.request_id),
        "tenant_id": str(tenant_id),
        "subject_digest": request.subject_digest,
        "counts": counts,
        # Every registered place, and a declared-free column only where it held the subject's id.
        "final_scan": {
            p.name: after[p.name] for p in scanned if p not in free or before[p.name] or after[p.name]
        },
        "places": [
            {
                "place": p.name,
                "what": p.what,
                "erased_by": p.erased_by,
                "before": before[p.name],
                "after": after[p.name],
                **({"runs": held[p.name]} if held.get(p.name) else {}),
            }
            for p in scanned
            # A declared-free column is listed only where it held the subject's id.
            if p not in free or before[p.name] or after[p.name]
        ],
        "searched": {"identifiers": 1, "values": len(scope.values), "runs": len(scope.run_ids)},
        "clean": clean,
        "remanence": REMANENCE,
        "completed_at": timezone.now().isoformat(),
    }
    memory = "memory_items" in counts
    with tenant_scope(tenant_id):
        left = {k: v for k, v in after.items() if v and (memory or k not in kept_places)}
        error = "" if clean else f"left behind: {canonical_json(left)}"
        runs = sorted({run for name in left for run in held.get(name, [])})
        if runs:
            error += f"; in runs {', '.join(runs[:LOCATED])}" + (" and more" if len(runs) > LOCATED else "")
        if not clean and not memory:
            error += "; the subject's memory is kept until nothing else holds their data (retry then)"
        ErasureRequest.objects.filter(pk=request.pk).update(
            status=ErasureStatus.COMPLETED if clean else ErasureStatus.FAILED,
            receipt=receipt,
            completed_at=timezone.now(),
            error=error,
            # Once clean, the request keeps only the subject's digest; a failed one keeps the id and
            # what it searched for, to retry.
            **({"subject_id": "", "searched": []} if clean else {"searched": list(scope.values)}),
        )
        if clean:  # the subject's earlier failed requests keep nothing of them either
            for earlier in _requests_of(tenant_id, request):
                ErasureRequest.objects.filter(pk=earlier.pk).update(
                    subject_id="", searched=[], error=f"{earlier.error}; completed by {request.request_id}"
                )
        erasure_finished_notify(tenant_id=tenant_id, request_id=request.request_id, clean=clean)
        return ErasureRequest.objects.get(pk=request.pk)


def _requests_of(tenant_id: UUID, request: ErasureRequest) -> list[ErasureRequest]:
    """The subject's other requests that failed and still keep their id and what they searched for."""
    with tenant_scope(tenant_id):
        return list(
            ErasureRequest.objects.filter(subject_digest=request.subject_digest, status=ErasureStatus.FAILED)
            .exclude(subject_id="")
            .exclude(pk=request.pk)
        )


def _memory_places() -> set[str]:
    return {place.name for place in places() if place.erased_by == "memory"}


def _erase_memory(*, request: ErasureRequest, tenant_id: UUID, subject: str) -> dict[str, int]:
    """Delete the subject's claims and vectors, each claim (and its source) tombstoned first."""
    with tenant_scope(tenant_id):
        items = list(MemoryItem.objects.filter(subject_id=subject).order_by("created_at"))
        for item in items:
            digests = [
                (
                    "claim",
                    claim_digest(
                        subject_id=subject, namespace=item.namespace, key=item.key, value=item.value
                    ),
                )
            ]
            if item.provenance.get("run_id") is not None:  # a claim with no run has no source to refuse
                digests.append(
                    (
                        "source",
                        source_digest(
                            subject_id=subject,
                            run_id=item.provenance.get("run_id"),
                            event_seq=item.provenance.get("event_seq"),
                        ),
                    )
                )
            for kind, digest in digests:
                Tombstone.objects.get_or_create(
                    tenant_id=tenant_id,
                    kind=kind,
                    digest=digest,
                    defaults={"subject_digest": request.subject_digest, "request": request},
                )
        vectors, _ = MemoryVector.objects.filter(memory__subject_id=subject).delete()
        MemoryItem.objects.filter(subject_id=subject).update(supersedes=None)  # the chain goes with them
        deleted_items, _ = MemoryItem.objects.filter(subject_id=subject).delete()
        counts = {
            "memory_items": deleted_items,
            "memory_vectors": vectors,
            "tombstones": Tombstone.objects.filter(request=request).count(),
        }
        _progress(request, memory=dict(counts))
    return counts


def _texts(value: Any) -> list[str]:
    """The strings inside an erased value, to search the other stores for: a plain value whole (a
    fact kept about the person: 王芳, Ada; not a two- or three-letter code), and inside a structured
    one every string, keys too ({"Zofia": "sister"}), but machine codes (an episode's
    {"workflow": "conversation"} names no one)."""
    if isinstance(value, str):  # a short code ("ok", "en") is an answer or a setting, not a name
        short_code = len(value) < FREE_TEXT_MIN_CHARS and CODE.fullmatch(value) is not None
        return [value] if len(value) >= MIN_VALUE_CHARS and not short_code else []
    return [t for t in strings_in(value, keys=True) if len(t) >= MIN_VALUE_CHARS and not CODE.fullmatch(t)]


def _collect(*, tenant_id: UUID, subject_id: str, subject_digest: str) -> Scope:
    """Everything the request covers, merged from memory and every registered eraser."""
    with tenant_scope(tenant_id):
        values = {v for item in MemoryItem.objects.filter(subject_id=subject_id) for v in _texts(item.value)}
    run_ids: set[UUID] = set()
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


def subject_places(*, tenant_id: UUID, subject_id: str) -> dict[str, int | None]:
    """Every registered place that holds the subject's id or text now, with its count, as the next
    erasure's receipt would count it before erasing (None: the place could not be read)."""
    scope = _collect(
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


def _runs_holding(scope: Scope, places: list[Place]) -> dict[str, list[str]]:
    """The runs whose rows in each of these places still hold the subject's data (read directly)."""
    with tenant_scope(scope.tenant_id):
        return {p.name: p.locate(scope) for p in places if p.locate is not None}


def _scan(scope: Scope, scanned: list[Place]) -> dict[str, int]:
    """Count every place, read directly (the same scope before and after erasure)."""
    with tenant_scope(scope.tenant_id):
        return {place.name: place.count(scope) for place in scanned}


def _claim_digests(
    *, subject_id: str, namespace: str, key: str, value: Any, provenance: dict[str, Any]
) -> list[str]:
    values = [_claim_value(subject_id=subject_id, namespace=namespace, key=key, value=value)]
    if provenance.get("run_id") is not None:
        values.append(
            _source_value(
                subject_id=subject_id, run_id=provenance.get("run_id"), event_seq=provenance.get("event_seq")
            )
        )
    # Keyed digests, and the unkeyed ones of tombstones laid before the key (they must keep refusing).
    return [*(keyed_digest(v) for v in values), *(json_digest(v) for v in values)]


def tombstoned(
    *, tenant_id: UUID, subject_id: str, namespace: str, key: str, value: Any, provenance: dict[str, Any]
) -> bool:
    """Whether this claim, or the event it comes from, was erased (must run inside the tenant scope).

    A claim with no run (an operator's entry, a store used outside a graph) has no source event: its
    source digest would be the same for every such claim about the subject, so only the claim counts
    (an older erasure may have left that digest; it refuses nothing)."""
    return bool(
        tombstoned_among(
            tenant_id=tenant_id, subject_id=subject_id, claims=[(namespace, key, value, provenance)]
        )
    )


def tombstoned_among(
    *, tenant_id: UUID, subject_id: str, claims: Sequence[tuple[str, str, Any, dict[str, Any]]]
) -> list[int]:
    """The positions of the (namespace, key, value, provenance) claims `tombstoned` refuses, found
    with one query (inside the tenant scope)."""
    digests = [
        _claim_digests(subject_id=subject_id, namespace=n, key=k, value=v, provenance=p)
        for n, k, v, p in claims
    ]
    wanted = {d for ds in digests for d in ds}
    if not wanted:
        return []
    found = set(
        Tombstone.objects.filter(tenant_id=tenant_id, digest__in=wanted).values_list("digest", flat=True)
    )
    return [i for i, ds in enumerate(digests) if found.intersection(ds)]


def _count_completed_requests(scope: Scope) -> int:
    # A request in flight (or failed, to be retried) keeps the id it works on and what it searched
    # for; a completed one never.
    return (
        ErasureRequest.objects.filter(status=ErasureStatus.COMPLETED)
        .filter(Q(subject_id=scope.subject_id) | ~Q(searched=[]))
        .count()
    )


def register() -> None:
    """Called from MemoryConfig.ready: memory's places and the columns free of a subject's data."""
    tenant, mine, owner = "t.tenant_id = %(tenant)s", "t.subject_id = %(subject)s", "t.subject_id"
    for column, kind in (
        ("subject_id", "text"),
        ("namespace", "text"),
        ("key", "text"),
        ("value", "json"),
        ("provenance", "json"),
        ("invalidation_reason", "text"),
        ("consent_basis", "text"),
    ):
        place_register(
            column_place(
                table="memory_items",
                column=column,
                kind=kind,
                tenant_sql=tenant,
                erased_by="memory",
                mine_sql=mine,
                owner_sql=owner,
                what=f"memory_items.{column} (deleted)",
            )
        )
    # The full-text postings hold the words of the subject's claims and their id; they are deleted
    # with the claims (the foreign key cascades), and the scan checks that none is left.
    for column in ("term", "subject_id"):
        place_register(
            column_place(
                table="memory_postings",
                column=column,
                kind="text",
                tenant_sql=tenant,
                erased_by="memory",
                mine_sql=mine,
                owner_sql=owner,
                what=f"memory_postings.{column} (deleted with the claims)",
            )
        )
    place_register(
        Place(
            name="erasure_requests.subject_id",
            what="erasure_requests.subject_id and .searched (cleared once clean)",
            erased_by="memory",
            count=_count_completed_requests,
            columns=(("erasure_requests", "subject_id"), ("erasure_requests", "searched")),
        )
    )
    free_register(
        "memory_vectors",
        "the embedder's name and the digest of the embedded text",
        "embedder_key",
        "content_digest",
    )
    free_register("memory_tombstones", "digests and their kind", "subject_digest", "kind", "digest")
    free_register(
        "erasure_requests",
        "digests, counts, statuses and who asked (a staff user)",
        "subject_digest",
        "requested_by",
        "status",
        "progress",
        "receipt",
    )
    free_register(
        "erasure_requests",
        "a failed erasure's exception class and message (Keeper's own text) and the "
        "names and counts of places left behind",
        "error",
    )
