"""Erasure of a subject across every store, with tombstones and a receipt that proves it.

Memory items and their vectors are deleted; tombstones keep digests only, so replaying old events
or re-running extraction cannot bring a claim back; every registered eraser (runs: conversation
text, summaries, session windows) runs; a final scan of every store must find nothing. Running it
twice is safe. The receipt names the subject by digest, never in clear.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from django.db import transaction
from django.utils import timezone

from core.digests import canonical_json, json_digest
from core.erasure import erasers
from core.errors import InvalidInput, NotFound
from core.models import Tenant
from core.tasks import task_send
from core.tenancy import tenant_scope
from memory.models import ErasureRequest, ErasureStatus, MemoryItem, MemoryVector, Tombstone

ERASE_TASK = "workers.tasks.execute_erasure"


def subject_digest(*, tenant_id: UUID, subject_id: str) -> str:
    return json_digest({"tenant": str(tenant_id), "subject": subject_id})


def claim_digest(*, subject_id: str, namespace: str, key: str, value: Any) -> str:
    return json_digest({"subject": subject_id, "namespace": namespace, "key": key, "value": value})


def source_digest(*, subject_id: str, run_id: Any, event_seq: Any) -> str:
    return json_digest({"subject": subject_id, "run_id": str(run_id), "event_seq": event_seq})


def erasure_request_create(*, tenant: Tenant, subject_id: str, requested_by: str) -> ErasureRequest:
    """Record the request and hand it to a worker (it runs as a Celery task with progress)."""
    if not isinstance(subject_id, str) or not 0 < len(subject_id) <= 200:
        raise InvalidInput("subject_id must be 1 to 200 characters", code="invalid_subject")
    with tenant_scope(tenant.tenant_id):
        request = ErasureRequest.objects.create(
            tenant=tenant, subject_id=subject_id, requested_by=requested_by,
            subject_digest=subject_digest(tenant_id=tenant.tenant_id, subject_id=subject_id),
        )  # fmt: skip
        # If the broker is away the request stays pending, visibly; erasure_execute can be run again.
        transaction.on_commit(
            lambda: task_send(name=ERASE_TASK, args=[str(request.request_id), str(tenant.tenant_id)])
        )
    return request


def _progress(request: ErasureRequest, **step: Any) -> None:
    request.progress = {**request.progress, **step}
    ErasureRequest.objects.filter(pk=request.pk).update(
        progress=request.progress, status=ErasureStatus.RUNNING
    )


def erasure_execute(*, tenant_id: UUID, request_id: UUID) -> ErasureRequest:
    """Erase the request's subject everywhere; idempotent. Raises (and records) a store's error:
    a failure of one store is never swallowed into a receipt that claims success."""
    with tenant_scope(tenant_id):
        request = ErasureRequest.objects.filter(request_id=request_id).first()
    if request is None:
        raise NotFound(f"no erasure request {request_id}", code="erasure_request_not_found")
    if request.status == ErasureStatus.COMPLETED:
        return request  # done: the receipt stands, and the subject's id is no longer kept to redo it
    subject = request.subject_id
    try:
        with tenant_scope(tenant_id):
            items = list(MemoryItem.objects.filter(subject_id=subject).order_by("created_at"))
            values = sorted({v for item in items for v in _texts(item.value)})
            for item in items:
                for kind, digest in (
                    ("claim", claim_digest(subject_id=subject, namespace=item.namespace, key=item.key, value=item.value)),
                    ("source", source_digest(subject_id=subject, run_id=item.provenance.get("run_id"),
                                             event_seq=item.provenance.get("event_seq"))),
                ):  # fmt: skip
                    Tombstone.objects.get_or_create(tenant_id=tenant_id, kind=kind, digest=digest,
                                                    defaults={"subject_digest": request.subject_digest,
                                                              "request": request})  # fmt: skip
            vectors, _ = MemoryVector.objects.filter(memory__subject_id=subject).delete()
            MemoryItem.objects.filter(subject_id=subject).update(supersedes=None)  # the chain goes with them
            deleted_items, _ = MemoryItem.objects.filter(subject_id=subject).delete()
            counts = {"memory_items": deleted_items, "memory_vectors": vectors,
                      "tombstones": Tombstone.objects.filter(request=request).count()}  # fmt: skip
            _progress(request, memory=dict(counts))
        for eraser in erasers():
            erased = eraser.erase(tenant_id=tenant_id, subject_id=subject)
            counts.update({f"{eraser.name}.{k}": v for k, v in erased.items()})
            with tenant_scope(tenant_id):
                _progress(request, **{eraser.name: erased})
        scan = _scan(tenant_id=tenant_id, subject_id=subject, values=values)
    except Exception as exc:
        with tenant_scope(tenant_id):
            ErasureRequest.objects.filter(pk=request.pk).update(
                status=ErasureStatus.FAILED, error=repr(exc)[:2000]
            )
        raise
    receipt = {"request_id": str(request.request_id), "tenant_id": str(tenant_id),
               "subject_digest": request.subject_digest, "counts": counts, "final_scan": scan,
               "clean": not any(scan.values()), "completed_at": timezone.now().isoformat()}  # fmt: skip
    with tenant_scope(tenant_id):
        ErasureRequest.objects.filter(pk=request.pk).update(
            status=ErasureStatus.COMPLETED if receipt["clean"] else ErasureStatus.FAILED, receipt=receipt,
            completed_at=timezone.now(), error="" if receipt["clean"] else f"left behind: {canonical_json(scan)}",
            # Once clean, the request keeps only the subject's digest; a failed one keeps the id to retry.
            **({"subject_id": ""} if receipt["clean"] else {}),
        )  # fmt: skip
        return ErasureRequest.objects.get(pk=request.pk)


def _texts(value: Any) -> list[str]:
    """The strings inside an erased value, to search the other stores for."""
    if isinstance(value, str):
        return [value] if len(value) >= 4 else []
    if isinstance(value, dict):
        return [t for v in value.values() for t in _texts(v)]
    if isinstance(value, list):
        return [t for v in value for t in _texts(v)]
    return []


def _scan(*, tenant_id: UUID, subject_id: str, values: list[str]) -> dict[str, int]:
    with tenant_scope(tenant_id):
        found = {
            "memory_items": MemoryItem.objects.filter(subject_id=subject_id).count(),
            "memory_vectors": MemoryVector.objects.filter(memory__subject_id=subject_id).count(),
        }
    for eraser in erasers():
        found.update({f"{eraser.name}.{k}": v for k, v in eraser.scan(tenant_id=tenant_id, subject_id=subject_id,
                                                                    values=values).items()})  # fmt: skip
    return found


def tombstoned(*, tenant_id: UUID, subject_id: str, namespace: str, key: str, value: Any,
               provenance: dict[str, Any]) -> bool:  # fmt: skip
    """Whether this claim, or the event it comes from, was erased (must run inside the tenant scope)."""
    digests = [claim_digest(subject_id=subject_id, namespace=namespace, key=key, value=value),
               source_digest(subject_id=subject_id, run_id=provenance.get("run_id"),
                             event_seq=provenance.get("event_seq"))]  # fmt: skip
    return Tombstone.objects.filter(tenant_id=tenant_id, digest__in=digests).exists()
