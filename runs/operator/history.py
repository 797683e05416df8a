"""A run's whole history as one versioned, digested JSON document: export, verify, and import
(fenced from workers). The export_history and import_history commands only parse and print.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from typing import Any
from uuid import UUID

from django.db import IntegrityError, transaction
from django.utils import timezone

from core.digests import json_digest
from core.errors import Conflict, InvalidInput
from core.ids import uuid7
from core.models import Tenant
from core.tenancy import run_tenant, tenant_ensure, tenant_of_call, tenant_scope
from retrieval.models import RetrievalSnapshot
from runs.conversations.erasure import event_redacted_as_recorded, redactions_of
from runs.kernel import apply
from runs.kernel import moves as m
from runs.kernel.errors import InvalidState, RunNotFound
from runs.kernel.models import (
    AgentEvent,
    AgentRun,
    Approval,
    Summary,
    ToolOperation,
)
from runs.kernel.state import state_encode

HISTORY_FORMAT = "keeper.run_history"
HISTORY_FORMAT_VERSION = 1


class HistoryImportError(InvalidInput):
    """The file cannot be imported: wrong format, tampered, or a broken event chain."""

    code = "history_import_refused"


# --- export -----------------------------------------------------------------------------------


def _plain(value: Any) -> Any:
    """Plain JSON for a value read through the ORM (full-precision ISO times, UUIDs as text)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, UUID):
        return str(value)
    if isinstance(value, Decimal):
        return str(value)
    return value


def _rows(queryset: Any, *, drop: Iterable[str] = ()) -> list[dict[str, Any]]:
    return [_plain({k: v for k, v in row.items() if k not in set(drop)}) for row in queryset.values()]


# When the file was written is not its content: two exports of an unchanged run have one digest
# (as the documentation promises), so a digest tells whether the run changed.
_NOT_DIGESTED = ("digest", "exported_at")


def history_digest(document: dict[str, Any]) -> str:
    return json_digest({k: v for k, v in document.items() if k not in _NOT_DIGESTED})


def _digest_matches(document: dict[str, Any]) -> bool:
    """The digest of the content; a file exported before took its export time in too."""
    stated = document.get("digest")
    legacy = json_digest({k: v for k, v in document.items() if k != "digest"})
    return stated in (history_digest(document), legacy)


@tenant_of_call
def run_history_document(*, run_id: UUID) -> dict[str, Any]:
    """The run and everything recorded about it, as one JSON document with a digest of its content.

    The top-level `workflow`, `workflow_version`, `status` and `events` keep the replay fixtures'
    format (runs/operator/replay.py reads them).
    """
    run = AgentRun.objects.select_related("tenant").filter(run_id=run_id).first()
    if run is None:
        raise RunNotFound(f"no run {run_id}")
    with tenant_scope(run.tenant_id):  # row-level security: snapshots are visible only in scope
        snapshots = _rows(
            RetrievalSnapshot.objects.filter(run_id=run.run_id).order_by("created_at"), drop=["tenant_id"]
        )
    document = {
        "format": HISTORY_FORMAT,
        "format_version": HISTORY_FORMAT_VERSION,
        "exported_at": timezone.now().isoformat(),
        "tenant": {"tenant_id": str(run.tenant_id), "slug": run.tenant.slug, "name": run.tenant.name},
        "workflow": run.workflow_name,
        "workflow_version": run.workflow_version,
        "status": run.status,
        "run": _rows(AgentRun.objects.filter(run_id=run.run_id), drop=["tenant_id", "imported"])[0],
        "events": _rows(
            AgentEvent.objects.filter(run_id=run.run_id, tenant_id=run.tenant_id).order_by("seq"),
            drop=["id", "run_id", "tenant_id", "run_created_at"],
        ),
        "operations": _rows(
            ToolOperation.objects.filter(run_id=run.run_id).order_by("id"), drop=["id", "run_id", "tenant_id"]
        ),
        "approvals": _rows(
            Approval.objects.filter(run_id=run.run_id).order_by("created_at"), drop=["run_id", "tenant_id"]
        ),
        "summaries": _rows(
            Summary.objects.filter(run_id=run.run_id).order_by("covers_from_seq", "created_at"),
            drop=["run_id", "tenant_id"],
        ),
        "retrieval_snapshots": snapshots,
    }
    document["digest"] = history_digest(document)
    return document


# --- import -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ImportedRun:
    run_id: UUID
    tenant: str
    events: int
    operations: int
    approvals: int
    summaries: int
    snapshots: int
    imported: bool = True


_SECTIONS = ("run", "events", "operations", "approvals", "summaries", "retrieval_snapshots")


def history_verify(document: Any) -> None:
    """Refuse a document that is not a history of this format, was changed, or whose chain is broken."""
    if not isinstance(document, dict):
        raise HistoryImportError("the file is not a JSON object")
    if document.get("format") != HISTORY_FORMAT:
        raise HistoryImportError(
            f"the file is not a {HISTORY_FORMAT} export (format {document.get('format')!r})"
        )
    if document.get("format_version") != HISTORY_FORMAT_VERSION:
        raise HistoryImportError(
            f"format version {document.get('format_version')!r} is not supported (expected {HISTORY_FORMAT_VERSION})"
        )
    missing = [s for s in _SECTIONS if s not in document]
    if missing:
        raise HistoryImportError("the file lacks " + ", ".join(missing))
    if not _digest_matches(document):
        raise HistoryImportError(
            "digest mismatch: the content is not what was exported (edited or truncated)"
        )
    run, events = document["run"], document["events"]
    if not isinstance(run, dict) or not isinstance(events, list) or not events:
        raise HistoryImportError("broken chain: the run or its events are missing")
    seqs = [e.get("seq") for e in events]
    if seqs != list(range(1, len(events) + 1)):
        raise HistoryImportError(f"broken chain: seqs are not continuous from 1 (got {seqs[:5]}...)")
    # An erasure redacts event states and records each change in a subject_erased event; a changed
    # state is accepted only when the event matches that record exactly.
    redactions = redactions_of(events)
    for event in events:
        if event.get("state_revision") != event["seq"]:
            raise HistoryImportError(
                f"broken chain: event {event['seq']} has revision {event.get('state_revision')}"
            )
        if (
            event.get("state") is not None
            and _state_digest(event["state"], event["seq"]) != event.get("state_digest")
            and not event_redacted_as_recorded(event, redactions)
        ):
            raise HistoryImportError(
                f"broken chain: event {event['seq']}'s state does not match its state digest"
            )
    if run.get("state_revision") != len(events):
        raise HistoryImportError(
            f"broken chain: the run is at revision {run.get('state_revision')}, its events end at {len(events)}"
        )
    if run.get("state_digest") and _state_digest(run.get("state"), 0) != run["state_digest"]:
        raise HistoryImportError("broken chain: the run's state does not match its state digest")


def _state_digest(state: Any, seq: int) -> str:
    try:
        return state_encode(state).digest
    except InvalidState as exc:
        where = f"event {seq}" if seq else "the run"
        raise HistoryImportError(
            f"broken chain: the state of {where} is not a valid state ({exc.message})"
        ) from None


def _when(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


def _stamp(value: str | None, what: str) -> datetime:
    """A timestamp the export always has (its column is NOT NULL)."""
    when = _when(value)
    if when is None:
        raise HistoryImportError(f"the file has no {what}")
    return when


def history_import(*, document: Any, tenant_slug: str | None = None, keep_ids: bool = False) -> ImportedRun:
    """Insert an exported run, with everything recorded about it, in one transaction, marked imported.

    A new run id unless `keep_ids`. The run keeps its exported status and is `imported`: a state,
    not a lease, that lease_acquire, the sweep, every transition (resume, cancel...) and messages
    respect, so nothing advances or changes it here; it can be read, exported and forked. Links that would point outside this instance (parent run, superseding run) and
    the idempotency key (a real request must never be answered by an imported copy) are cleared.
    """
    history_verify(document)
    source = document["run"]
    slug = tenant_slug or str((document.get("tenant") or {}).get("slug") or "")
    if not slug:
        raise HistoryImportError("no tenant: give --tenant (the file does not name one)")
    run_id = UUID(source["run_id"]) if keep_ids else uuid7()

    def new_id(old: str) -> UUID:
        return UUID(old) if keep_ids else uuid.uuid4()

    try:
        with transaction.atomic(), ExitStack() as scope:
            tenant = tenant_ensure(slug=slug, name=str((document.get("tenant") or {}).get("name") or slug))
            if run_tenant(run_id) is not None:  # any tenant's: run ids are global
                raise Conflict(
                    f"run {run_id} already exists here (import without --keep-ids)", code="run_exists"
                )
            scope.enter_context(
                tenant_scope(tenant.tenant_id)
            )  # row-level security: the rest is this tenant's
            apply(
                m.HistoryImported(
                    run=_imported_run(source, run_id=run_id, tenant=tenant),
                    events=[
                        AgentEvent(
                            run_id=run_id,
                            tenant_id=tenant.tenant_id,
                            seq=e["seq"],
                            event_type=e["event_type"],
                            step_id=e.get("step_id"),
                            attempt=e.get("attempt"),
                            payload=e.get("payload"),
                            actor=e.get("actor") or "",
                            state_revision=e["state_revision"],
                            state_digest=e.get("state_digest") or "",
                            state=e.get("state"),
                            next_step=e.get("next_step"),
                            client_message_id=e.get("client_message_id"),
                            created_at=_when(e.get("created_at")) or timezone.now(),
                        )
                        for e in document["events"]
                    ],
                )
            )
            ToolOperation.objects.bulk_create(
                ToolOperation(
                    operation_id=o["operation_id"],
                    tenant=tenant,
                    run_id=run_id,
                    step_id=o["step_id"],
                    tool_name=o["tool_name"],
                    tool_contract_version=o["tool_contract_version"],
                    request_digest=o["request_digest"],
                    status=o["status"],
                    external_ref=o.get("external_ref"),
                    result=o.get("result"),
                    attempts=o.get("attempts") or 0,
                    history=o.get("history") or [],
                    call_deadline_at=_when(o.get("call_deadline_at")),
                    created_at=_stamp(o["created_at"], "operation created_at"),
                    updated_at=_stamp(o["updated_at"], "operation updated_at"),
                )
                for o in document["operations"]
            )
            approvals = [
                (
                    Approval(
                        approval_id=new_id(a["approval_id"]),
                        tenant=tenant,
                        run_id=run_id,
                        step_id=a["step_id"],
                        request=a["request"],
                        request_digest=a["request_digest"],
                        reasons=a.get("reasons") or [],
                        status=a["status"],
                        expires_at=_stamp(a["expires_at"], "approval expires_at"),
                        decided_by=a.get("decided_by") or "",
                        decided_at=_when(a.get("decided_at")),
                        note=a.get("note") or "",
                    ),
                    a["created_at"],
                )
                for a in document["approvals"]
            ]
            Approval.objects.bulk_create([a for a, _ in approvals])
            summaries = [
                (
                    Summary(
                        summary_id=new_id(s["summary_id"]),
                        tenant=tenant,
                        run_id=run_id,
                        covers_from_seq=s["covers_from_seq"],
                        covers_to_seq=s["covers_to_seq"],
                        source_digest=s["source_digest"],
                        compactor=s["compactor"],
                        facts=s.get("facts") or [],
                        open_questions=s.get("open_questions") or [],
                        decisions=s.get("decisions") or [],
                        carry=s.get("carry") or {},
                        text=s["text"],
                        token_count=s["token_count"],
                        status=s["status"],
                    ),
                    s["created_at"],
                )
                for s in document["summaries"]
            ]
            Summary.objects.bulk_create([s for s, _ in summaries])
            # auto_now_add overwrites created_at on insert: put the exported times back.
            for approval, created in approvals:
                Approval.objects.filter(pk=approval.pk).update(created_at=_when(created))
            for summary, created in summaries:
                Summary.objects.filter(pk=summary.pk).update(created_at=_when(created))
            with tenant_scope(tenant.tenant_id):  # row-level security: insert in the tenant's scope
                for snap in document["retrieval_snapshots"]:
                    snapshot_id = snap["snapshot_id"] if keep_ids else f"rs_{uuid.uuid4().hex}"
                    RetrievalSnapshot.objects.create(
                        snapshot_id=snapshot_id,
                        tenant=tenant,
                        run_id=run_id,
                        query_digest=snap["query_digest"],
                        index_version=snap["index_version"],
                        acl_principal=snap["acl_principal"],
                        k=snap["k"],
                        hits=snap.get("hits") or [],
                    )
                    RetrievalSnapshot.objects.filter(pk=snapshot_id).update(
                        created_at=_when(snap["created_at"])
                    )
    except IntegrityError as exc:
        raise Conflict(
            f"the import collides with rows already here ({str(exc).splitlines()[0]}); operation ids are unique "
            "per tenant: import into another tenant (--tenant), or without --keep-ids",
            code="import_conflict",
        ) from None
    return ImportedRun(
        run_id=run_id,
        tenant=tenant.slug,
        events=len(document["events"]),
        operations=len(document["operations"]),
        approvals=len(approvals),
        summaries=len(summaries),
        snapshots=len(document["retrieval_snapshots"]),
    )


def _imported_run(source: dict[str, Any], *, run_id: UUID, tenant: Tenant) -> AgentRun:
    """The exported run as a row to restore (not saved): imported, unleased, its links cleared."""
    return AgentRun(
        run_id=run_id,
        tenant=tenant,
        workflow_name=source["workflow_name"],
        workflow_version=source["workflow_version"],
        state_schema_version=source["state_schema_version"],
        status=source["status"],
        next_step=source.get("next_step"),
        state=source["state"],
        state_revision=source["state_revision"],
        state_digest=source.get("state_digest") or "",
        suspend_reason=source.get("suspend_reason"),
        suspend_detail=source.get("suspend_detail") or "",
        result=source.get("result"),
        lease_owner=None,
        lease_expires_at=None,
        imported=True,
        lease_epoch=source.get("lease_epoch") or 0,
        attempt=source.get("attempt") or 0,
        wake_at=_when(source.get("wake_at")),
        dispatched_at=_when(source.get("dispatched_at")),
        idempotency_key=None,
        input_digest=source["input_digest"],
        parent_run=None,
        fork_seq=source.get("fork_seq"),
        fork_expires_at=None,
        superseded_by=None,
        subject=source.get("subject") or "",
        resume_requested_at=_when(source.get("resume_requested_at")),
        resume_requested_by=source.get("resume_requested_by") or "",
        created_at=_stamp(source["created_at"], "run created_at"),
        updated_at=_stamp(source["updated_at"], "run updated_at"),
    )
