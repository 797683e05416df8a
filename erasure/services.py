"""Erasure of a subject across every store: the request, its execution, its retry.

request (erasure_request_create) → a worker runs erasure_execute → the registry's erasers
(erasure/registry.py, settings.ERASERS) collect what the request covers and erase it → the
final scan counts every place again → the receipt (erasure/receipt.py). Running it twice is safe; a
request that did not finish says what is left and what to do, and is retried as it is.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any
from uuid import UUID

from django.db import connection, transaction
from django.utils import timezone

from core.digests import subject_digest
from core.errors import Conflict, InvalidInput, NotFound
from core.models import Tenant
from core.tasks import task_send
from core.tenancy import tenant_scope
from erasure.matching import Scope
from erasure.models import ErasureRequest, ErasureStatus
from erasure.receipt import failed_in_words, left_in_words, receipt_build
from erasure.registry import erasers, free_places, places
from erasure.scan import runs_holding, scan, scope_collect

logger = logging.getLogger(__name__)

ERASE_TASK = "workers.tasks.execute_erasure"
MAX_SUBJECT_CHARS = 200


def _send(request: ErasureRequest) -> None:
    # If the broker is away the request stays pending, visibly; asking again sends it again.
    transaction.on_commit(
        lambda: task_send(name=ERASE_TASK, args=[str(request.request_id), str(request.tenant_id)])
    )


def _subject_lock(digest: str) -> None:
    """Two requests for one subject at once (a double click, a retry beside a new request): one goes
    first, to the end of its transaction."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", [f"erasure:{digest}"])


def erasure_request_create(*, tenant: Tenant, subject_id: str, requested_by: str) -> ErasureRequest:
    """Record the request and hand it to a worker (it runs as a Celery task with progress).

    While a request for the same subject is still pending or running, that request is the answer
    (six clicks make one request), handed to a worker again in case the broker lost it or its worker
    died (erasure is idempotent, and each run is erased under its row's lock)."""
    if not isinstance(subject_id, str) or not 0 < len(subject_id) <= MAX_SUBJECT_CHARS:
        raise InvalidInput(f"subject_id must be 1 to {MAX_SUBJECT_CHARS} characters", code="invalid_subject")
    digest = subject_digest(tenant_id=tenant.tenant_id, subject_id=subject_id)
    with tenant_scope(tenant.tenant_id):
        _subject_lock(digest)
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
        _send(request)
    return request


def erasure_request_retry(*, tenant: Tenant, request_id: UUID) -> ErasureRequest:
    """Hand a request to a worker again. A failed one picks up where it stopped: what was erased stays
    erased, its progress and what it searched for are kept, and every eraser skips what is done. A
    pending or running one is sent again (its broker message or worker may be lost); a completed one
    stands as it is. Idempotent."""
    with tenant_scope(tenant.tenant_id):
        found = ErasureRequest.objects.filter(tenant=tenant, request_id=request_id).first()
        if found is None:
            raise NotFound(f"no erasure request {request_id}", code="erasure_request_not_found")
        _subject_lock(found.subject_digest)
        request = ErasureRequest.objects.select_for_update().get(pk=found.pk)
        if request.status == ErasureStatus.COMPLETED:
            return request
        if not request.subject_id:  # a later request for the subject completed and cleared this one
            raise Conflict(
                "a later request for the same subject completed; this one keeps nothing to retry with",
                code="erasure_request_superseded",
            )
        if request.status == ErasureStatus.FAILED:
            request.status, request.error, request.receipt, request.completed_at = (
                ErasureStatus.PENDING,
                "",
                None,
                None,
            )
            request.save(update_fields=["status", "error", "receipt", "completed_at"])
        _send(request)
    return request


def _progress(request: ErasureRequest, **step: Any) -> None:
    request.progress = {**request.progress, **step}
    ErasureRequest.objects.filter(pk=request.pk).update(
        progress=request.progress, status=ErasureStatus.RUNNING
    )


def _requests_of(tenant_id: UUID, request: ErasureRequest) -> list[ErasureRequest]:
    """The subject's other requests that failed and still keep their id and what they searched for."""
    with tenant_scope(tenant_id):
        return list(
            ErasureRequest.objects.filter(subject_digest=request.subject_digest, status=ErasureStatus.FAILED)
            .exclude(subject_id="")
            .exclude(pk=request.pk)
        )


def erasure_execute(*, tenant_id: UUID, request_id: UUID) -> ErasureRequest:
    """Erase the request's subject everywhere; idempotent. Raises (and records) a store's error:
    a failure of one store is never swallowed into a receipt that claims success.

    Every eraser runs in the registry's order, but those that wait (`last`: the subject's memory) run
    only once the scan finds nothing else left: a failed erasure keeps the facts it searches the
    other stores for, so a retry searches for them again.
    """
    with tenant_scope(tenant_id):
        request = ErasureRequest.objects.filter(request_id=request_id).first()
    if request is None:
        raise NotFound(f"no erasure request {request_id}", code="erasure_request_not_found")
    if request.status == ErasureStatus.COMPLETED:
        return request  # done: the receipt stands, and the subject's id is no longer kept to redo it
    subject = request.subject_id
    scope: Scope | None = None
    step = "collect"
    try:
        scope = scope_collect(tenant_id=tenant_id, subject_id=subject, subject_digest=request.subject_digest)
        # A retry searches again for what every earlier attempt searched for (it erased some of it).
        kept = {
            v for r in [request, *_requests_of(tenant_id, request)] for v in r.searched if isinstance(v, str)
        }
        scope = replace(scope, values=tuple(sorted(set(scope.values) | kept)))
        free = free_places()
        scanned = [*places(), *free]
        before = scan(scope, scanned)
        counts: dict[str, int] = {}
        first = [e for e in erasers() if e.erases and not e.last]
        waiting = [e for e in erasers() if e.erases and e.last]
        waiting_places = {p.name for e in waiting for p in e.places()}
        for eraser in first:
            step = eraser.name
            counts.update(_erase(eraser, scope, request, tenant_id))
        step = "final scan"
        after = scan(scope, scanned)
        waited = bool(waiting) and any(n for name, n in after.items() if name not in waiting_places)
        if waiting and not waited:
            for eraser in waiting:
                step = eraser.name
                counts.update(_erase(eraser, scope, request, tenant_id))
            step = "final scan"
            after = scan(scope, scanned)  # else nothing changed since: that scan is the final one
    except Exception as exc:
        # An eraser that raised may have erased texts already: the request keeps what it searched for,
        # as a request that ends with data left behind does, so the retry looks for them again.
        searched = {"searched": list(scope.values)} if scope is not None else {}
        with tenant_scope(tenant_id):
            ErasureRequest.objects.filter(pk=request.pk).update(
                status=ErasureStatus.FAILED,
                error=failed_in_words(step, exc, request.request_id, subject),
                **searched,
            )
        raise
    clean = not any(after.values())
    # Where a run's rows still hold the subject's data (a run without the subject whose input named
    # them, say), which runs: a receipt that says only "agent_runs.state 1" leaves nowhere to look.
    held = runs_holding(scope, [p for p in scanned if after[p.name]]) if not clean else {}
    receipt = receipt_build(
        request_id=request.request_id,
        tenant_id=tenant_id,
        subject_digest=request.subject_digest,
        scope=scope,
        counts=counts,
        scanned=scanned,
        free=free,
        before=before,
        after=after,
        held=held,
    )
    for name in {p["place"] for p in receipt["places"] if p.get("declared_free")}:
        logger.warning(
            "erasure %s: %s is declared free of personal data, yet held the subject's data", request_id, name
        )
    with tenant_scope(tenant_id):
        left = {k: v for k, v in after.items() if v and (not waited or k not in waiting_places)}
        error = (
            ""
            if clean
            else left_in_words(
                left=left,
                held=held,
                places={p.name: p for p in scanned},
                kept=[e.name for e in waiting] if waited else [],
                request_id=request.request_id,
            )
        )
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
        for eraser in erasers():
            eraser.finished(tenant_id=tenant_id, request_id=request.request_id, clean=clean)
        return ErasureRequest.objects.get(pk=request.pk)


def _erase(eraser: Any, scope: Scope, request: ErasureRequest, tenant_id: UUID) -> dict[str, int]:
    erased = eraser.erase(scope=scope, request_id=request.request_id, subject_digest=request.subject_digest)
    with tenant_scope(tenant_id):
        _progress(request, **{eraser.name: erased})
    return {eraser.count_key(k): v for k, v in erased.items()}
