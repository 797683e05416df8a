"""What the operator commands do: find stuck runs, resend their wake-ups, export and import a run's
whole history, and purge finished runs and old snapshots by a retention policy.

The commands in runs/management/commands/ only parse arguments and print; the rules live here.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any
from uuid import UUID

from django.db import IntegrityError, connection, transaction
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone

from core.digests import json_digest
from core.errors import Conflict, InvalidInput
from core.models import Tenant
from core.tenancy import run_tenant, tenant_ensure, tenant_of_call, tenant_scope
from retrieval.models import RetrievalSnapshot
from runs.erasure import event_redacted_as_recorded, redactions_of
from runs.errors import InvalidState, RunNotFound
from runs.models import (
    TERMINAL_RUN_STATUSES,
    AgentEvent,
    AgentRun,
    Approval,
    OperationStatus,
    RunStatus,
    Summary,
    ToolOperation,
)
from runs.services.dispatch import run_enqueue
from runs.services.forks import forks_expire
from runs.services.state import state_encode

# A run unchanged this long while it should move counts as stuck (the sweep resends every few seconds).
STUCK_AFTER_SECONDS = 300.0
HISTORY_FORMAT = "keeper.run_history"
HISTORY_FORMAT_VERSION = 1


class HistoryImportError(InvalidInput):
    """The file cannot be imported: wrong format, tampered, or a broken event chain."""

    code = "history_import_refused"


# --- stuck runs -------------------------------------------------------------------------------


@dataclass
class StuckRun:
    run_id: UUID
    tenant: str
    workflow: str
    status: str
    next_step: str | None
    lease_owner: str | None
    lease_expires_at: datetime | None
    age_seconds: float  # since the run last changed
    reasons: list[str] = field(default_factory=list)
    # True when a wake-up can move it (running, or suspended with a resume request).
    dispatchable: bool = False

    def as_json(self) -> dict[str, Any]:
        return {
            "run_id": str(self.run_id),
            "tenant": self.tenant,
            "workflow": self.workflow,
            "status": self.status,
            "next_step": self.next_step,
            "lease_owner": self.lease_owner,
            "lease_expires_at": self.lease_expires_at.isoformat() if self.lease_expires_at else None,
            "age_seconds": round(self.age_seconds, 1),
            "reasons": self.reasons,
            "dispatchable": self.dispatchable,
        }


def _run_tenant_ids() -> list[UUID]:
    """Every tenant that has runs, through the narrow function (ids only): cross-tenant operator
    work is done tenant by tenant, each in its own row-level security scope."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT tenant_id FROM keeper_run_tenants() ORDER BY 1")
        return [row[0] for row in cursor.fetchall()]


def _ago(now: datetime, then: datetime) -> str:
    return f"{int((now - then).total_seconds())}s ago"


@tenant_of_call
def runs_stuck(*, older_than: float, tenant_id: UUID | None = None) -> list[StuckRun]:
    """Runs that should be moving and have not for `older_than` seconds, oldest first, with why.

    - running, nobody holds it (no lease, or the lease expired), due (wake_at passed) and unchanged
      for `older_than`: the wake-ups are lost or no worker takes them;
    - suspended with a resume request nobody verified for `older_than`;
    - an operation `unknown` (always: a person must reconcile it) or `started` for `older_than`.
    Imported runs (fenced on purpose) are left out.
    """
    if older_than < 0:
        raise InvalidInput("--older-than must be zero or more seconds", code="invalid_age")
    if tenant_id is None:
        every = [s for t in _run_tenant_ids() for s in runs_stuck(older_than=older_than, tenant_id=t)]
        return sorted(every, key=lambda s: -s.age_seconds)
    now = timezone.now()
    cutoff = now - timedelta(seconds=older_than)
    runs = AgentRun.objects.select_related("tenant").filter(imported=False)
    if tenant_id is not None:
        runs = runs.filter(tenant_id=tenant_id)
    unheld = Q(lease_owner__isnull=True) | Q(lease_expires_at__lt=now)
    due = Q(wake_at__isnull=True) | Q(wake_at__lte=now)
    found: dict[UUID, StuckRun] = {}

    def entry(run: AgentRun) -> StuckRun:
        if run.run_id not in found:
            found[run.run_id] = StuckRun(
                run_id=run.run_id,
                tenant=run.tenant.slug,
                workflow=f"{run.workflow_name} v{run.workflow_version}",
                status=run.status,
                next_step=run.next_step,
                lease_owner=run.lease_owner,
                lease_expires_at=run.lease_expires_at,
                age_seconds=(now - run.updated_at).total_seconds(),
            )
        return found[run.run_id]

    for run in runs.filter(unheld, due, status=RunStatus.RUNNING, updated_at__lt=cutoff):
        stuck = entry(run)
        stuck.dispatchable = True
        if run.lease_owner is not None and run.lease_expires_at is not None:
            stuck.reasons.append(f"lease of {run.lease_owner} expired {_ago(now, run.lease_expires_at)}")
        elif run.wake_at is not None:
            stuck.reasons.append(f"wake_at passed {_ago(now, run.wake_at)}, nobody took it")
        elif run.dispatched_at is None:
            stuck.reasons.append("no lease and never re-dispatched")
        else:
            stuck.reasons.append(f"no lease; last wake-up sent {_ago(now, run.dispatched_at)}")
    for run in runs.filter(status=RunStatus.SUSPENDED, resume_requested_at__lt=cutoff):
        stuck = entry(run)
        stuck.dispatchable = True
        stuck.reasons.append(
            f"resume requested by {run.resume_requested_by or '?'} {_ago(now, run.resume_requested_at)}"
            ", not verified"
        )
    ops = ToolOperation.objects.filter(
        Q(status=OperationStatus.UNKNOWN) | Q(status=OperationStatus.STARTED, updated_at__lt=cutoff),
        run__in=runs,
    ).order_by("updated_at")
    by_run = {run.run_id: run for run in runs.filter(run_id__in=ops.values("run_id"))}
    for op in ops:
        entry(by_run[op.run_id]).reasons.append(
            f"operation {op.operation_id} {op.status} since {_ago(now, op.updated_at)}"
        )
    return sorted(found.values(), key=lambda s: -s.age_seconds)


# --- redispatch -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Redispatch:
    run_ids: list[UUID]
    sent: int
    dry_run: bool


@tenant_of_call
def runs_for_redispatch(*, run_ids: Sequence[str], tenant_id: UUID | None = None) -> list[UUID]:
    """The runs named by the operator; an id that is not a run (of this tenant) is an error."""
    wanted: list[UUID] = []
    for raw in run_ids:
        try:
            wanted.append(UUID(raw))
        except ValueError:
            raise InvalidInput(f"{raw!r} is not a run id", code="invalid_run_id") from None
    if tenant_id is None:  # any tenant's run: its tenant through the narrow function, nothing else
        known = {run_id for run_id in wanted if run_tenant(run_id) is not None}
    else:
        known = set(
            AgentRun.objects.filter(run_id__in=wanted, tenant_id=tenant_id).values_list("run_id", flat=True)
        )
    missing = [str(r) for r in wanted if r not in known]
    if missing:
        raise RunNotFound("no run " + ", ".join(missing) + (" in this tenant" if tenant_id else ""))
    return list(dict.fromkeys(wanted))


def runs_wake(*, run_ids: Iterable[UUID], dry_run: bool = False) -> Redispatch:
    """Send a wake-up to each run, through the same path as the sweep. No state changes: PostgreSQL
    still decides (lease_acquire) whether anything runs."""
    ids = list(run_ids)
    if dry_run:
        return Redispatch(run_ids=ids, sent=0, dry_run=True)
    return Redispatch(run_ids=ids, sent=sum(1 for run_id in ids if run_enqueue(run_id=run_id)), dry_run=False)


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


def history_digest(document: dict[str, Any]) -> str:
    return json_digest({k: v for k, v in document.items() if k != "digest"})


@tenant_of_call
def run_history_document(*, run_id: UUID) -> dict[str, Any]:
    """The run and everything recorded about it, as one JSON document with a digest of its content.

    The top-level `workflow`, `workflow_version`, `status` and `events` keep the replay fixtures'
    format (runs/replay.py reads them).
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
            AgentEvent.objects.filter(run_id=run.run_id).order_by("seq"), drop=["id", "run_id", "tenant_id"]
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
    if document.get("digest") != history_digest(document):
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
    run_id = UUID(source["run_id"]) if keep_ids else uuid.uuid4()

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
            _insert_run(source, run_id=run_id, tenant=tenant)
            AgentEvent.objects.bulk_create(
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
                    created_at=_when(o["created_at"]),
                    updated_at=_when(o["updated_at"]),
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
                        expires_at=_when(a["expires_at"]),
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


def _insert_run(source: dict[str, Any], *, run_id: UUID, tenant: Tenant) -> None:
    # A bulk restore, not a step: the store's per-step statements do not fit, the ORM writes the row.
    AgentRun.objects.bulk_create(
        [
            AgentRun(
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
                created_at=_when(source["created_at"]),
                updated_at=_when(source["updated_at"]),
            )
        ]
    )


# --- purge ------------------------------------------------------------------------------------


PURGE_BATCH = 1000


@dataclass
class PurgeReport:
    dry_run: bool
    runs: int = 0
    events: int = 0
    operations: int = 0
    approvals: int = 0
    summaries: int = 0
    snapshots: int = 0
    forks_expired: int = 0
    kept_open_operations: int = 0  # finished runs kept: an operation still started/unknown
    batches: int = 0

    def as_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def purge_statuses(raw: str) -> list[str]:
    statuses = [s.strip() for s in raw.split(",") if s.strip()]
    wrong = [s for s in statuses if s not in TERMINAL_RUN_STATUSES]
    if not statuses or wrong:
        raise InvalidInput(
            f"--status takes finished statuses only ({', '.join(sorted(TERMINAL_RUN_STATUSES))}), not {', '.join(wrong) or 'nothing'}",
            code="invalid_status",
        )
    return statuses


def _purgeable(*, older_than_days: float, statuses: Sequence[str], tenant_id: UUID | None) -> Any:
    """Finished runs past the policy that nothing still needs.

    Left out: runs with forks (a fork's operations live on its parent, and parent_run is PROTECT;
    the parent goes once its forks are gone) and runs with an operation still `started`/`unknown`
    (its effect may have happened: a person reconciles it first).
    """
    cutoff = timezone.now() - timedelta(days=older_than_days)
    runs = AgentRun.objects.filter(status__in=list(statuses), updated_at__lt=cutoff)
    if tenant_id is not None:
        runs = runs.filter(tenant_id=tenant_id)
    return runs.exclude(Exists(AgentRun.objects.filter(parent_run_id=OuterRef("run_id")))).exclude(
        Exists(
            ToolOperation.objects.filter(
                run_id=OuterRef("run_id"), status__in=[OperationStatus.STARTED, OperationStatus.UNKNOWN]
            )
        )
    )


@tenant_of_call
def runs_purge(
    *,
    older_than_days: float,
    statuses: Sequence[str],
    tenant_id: UUID | None = None,
    snapshots_older_than_days: float | None = None,
    dry_run: bool = False,
    batch_size: int = PURGE_BATCH,
    progress: Callable[[str], None] = lambda line: None,
) -> PurgeReport:
    """Delete finished runs past the retention policy in batches (one transaction each), then old
    retrieval snapshots (in each tenant's scope), then expire orphan forks. Never an active run."""
    if older_than_days < 0 or (snapshots_older_than_days is not None and snapshots_older_than_days < 0):
        raise InvalidInput("ages must be zero or more days", code="invalid_age")
    statuses = [s for s in statuses if s in TERMINAL_RUN_STATUSES]  # the active ones never
    report = PurgeReport(dry_run=dry_run)
    if tenant_id is None:  # tenant by tenant (row-level security), then the global parts below
        for each in _run_tenant_ids():
            part = runs_purge(
                older_than_days=older_than_days,
                statuses=statuses,
                tenant_id=each,
                dry_run=dry_run,
                batch_size=batch_size,
                progress=progress,
            )
            for name, value in part.as_json().items():
                if name != "dry_run":
                    setattr(report, name, getattr(report, name) + value)
        return _purge_global(
            report,
            snapshots_older_than_days=snapshots_older_than_days,
            dry_run=dry_run,
            batch_size=batch_size,
            progress=progress,
        )
    candidates = _purgeable(older_than_days=older_than_days, statuses=statuses, tenant_id=tenant_id)
    cutoff = timezone.now() - timedelta(days=older_than_days)
    kept = AgentRun.objects.filter(status__in=statuses, updated_at__lt=cutoff).filter(
        Exists(
            ToolOperation.objects.filter(
                run_id=OuterRef("run_id"), status__in=[OperationStatus.STARTED, OperationStatus.UNKNOWN]
            )
        )
    )
    report.kept_open_operations = (kept.filter(tenant_id=tenant_id) if tenant_id else kept).count()
    if dry_run:
        ids = candidates.values("run_id")
        report.runs = candidates.count()
        report.events = AgentEvent.objects.filter(run_id__in=ids).count()
        report.operations = ToolOperation.objects.filter(run_id__in=ids).count()
        report.approvals = Approval.objects.filter(run_id__in=ids).count()
        report.summaries = Summary.objects.filter(run_id__in=ids).count()
    else:
        while True:
            try:
                with transaction.atomic():
                    batch = list(
                        candidates.order_by("updated_at").values_list("run_id", flat=True)[:batch_size]
                    )
                    if not batch:
                        break
                    # tool_operations.run_id is PROTECT: they go first, explicitly; the rest cascade.
                    operations, _ = ToolOperation.objects.filter(run_id__in=batch).delete()
                    _, per_model = AgentRun.objects.filter(run_id__in=batch, status__in=statuses).delete()
            except IntegrityError:  # a fork of one of them was created meanwhile (parent_run is PROTECT)
                raise Conflict(
                    f"a run of batch {report.batches + 1} gained a fork while purging; that batch was rolled back "
                    f"({report.runs} runs deleted before it): run purge again",
                    code="purge_conflict",
                ) from None
            report.batches += 1
            report.operations += operations
            report.runs += per_model.get("runs.AgentRun", 0)
            report.events += per_model.get("runs.AgentEvent", 0)
            report.approvals += per_model.get("runs.Approval", 0)
            report.summaries += per_model.get("runs.Summary", 0)
            progress(
                f"batch {report.batches}: {per_model.get('runs.AgentRun', 0)} runs deleted ({report.runs} so far)"
            )
    if snapshots_older_than_days is not None:
        report.snapshots = snapshots_purge(
            older_than_days=snapshots_older_than_days,
            tenant_id=tenant_id,
            dry_run=dry_run,
            batch_size=batch_size,
            progress=progress,
        )
    return report


def _purge_global(
    report: PurgeReport,
    *,
    snapshots_older_than_days: float | None,
    dry_run: bool,
    batch_size: int,
    progress: Callable[[str], None],
) -> PurgeReport:
    if snapshots_older_than_days is not None:
        report.snapshots = snapshots_purge(
            older_than_days=snapshots_older_than_days,
            tenant_id=None,
            dry_run=dry_run,
            batch_size=batch_size,
            progress=progress,
        )
    # forks_expire is global; with a tenant filter it is left for the beat
    if dry_run:
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM keeper_forks_expired()")
            report.forks_expired = cursor.fetchone()[0]
    else:
        report.forks_expired = forks_expire()
    return report


@tenant_of_call
def snapshots_purge(
    *,
    older_than_days: float,
    tenant_id: UUID | None,
    dry_run: bool,
    batch_size: int = PURGE_BATCH,
    progress: Callable[[str], None] = lambda line: None,
) -> int:
    """Delete retrieval snapshots older than the policy, tenant by tenant (row-level security)."""
    cutoff = timezone.now() - timedelta(days=older_than_days)
    tenants = Tenant.objects.filter(tenant_id=tenant_id) if tenant_id else Tenant.objects.all()
    total = 0
    for tenant in tenants.order_by("slug"):
        while True:
            with tenant_scope(tenant.tenant_id):
                old = RetrievalSnapshot.objects.filter(created_at__lt=cutoff)
                if dry_run:
                    total += old.count()
                    break
                batch = list(old.order_by("created_at").values_list("snapshot_id", flat=True)[:batch_size])
                deleted = RetrievalSnapshot.objects.filter(snapshot_id__in=batch).delete()[0] if batch else 0
            if not batch:
                break
            total += deleted
            progress(f"snapshots of {tenant.slug}: {deleted} deleted ({total} so far)")
    return total
