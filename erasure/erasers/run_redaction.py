"""How one of the subject's runs is redacted, and how names of the subject are keyed in every run.

A run is redacted in one transaction under its row's lock: its new state goes in with the fenced
`subject_erased` event (the kernel's SubjectErased move), and each changed event as an EventRedacted
move; who acted is keyed the same way, and a lease held under the subject's name is given back with
LeaseReleased (runs.kernel.apply is the only writer of the run tables). Approvals and operations are
the runs' side rows: redacted here.
"""

from __future__ import annotations

import json
from typing import Any
from uuid import UUID

from django.db import OperationalError, connection

from core.digests import erased_id, keyed_digest
from core.tenancy import tenant_scope
from erasure.matching import Scope, holds_subject, subject_condition
from erasure.redactor import Redactor
from runs.conversations.erasure import (
    ERASED,
    ERASED_DETAIL,
    ERASED_EVENT,
    TEXT_KEYS,
    redaction_digest,
)
from runs.conversations.messages import CONVERSATION_EVENTS
from runs.kernel import apply
from runs.kernel import moves as m
from runs.kernel.models import AgentEvent, AgentRun, Approval, OperationStatus, ToolOperation
from runs.kernel.state import state_encode

DEADLOCK = "40P01"  # deadlock_detected: PostgreSQL rolled this transaction back, the other one goes on


def _erased_key(key: str | None, run_id: UUID, redact: Redactor) -> str | None:
    """A run's idempotency key as erasure leaves it. A LangGraph thread's stays the thread's own
    (erased_id of the key: its saver finds the erased thread by it and refuses it); any other run's
    becomes its own, so a client that uses the key again after an erasure starts a run that a second
    erasure can erase (one erased key for both would break the second erasure on its uniqueness)."""
    if not key:
        return key
    erased = str(redact.ident(key))
    if erased == key or key.startswith("langgraph:"):
        return erased
    return erased_id(f"{key}\n{run_id}")


def runs_stop(scope: Scope, request_id: UUID) -> None:
    """Every unfinished run of the request stops first, in one transaction, before any is redacted:
    redacted one after another, the last ones would go on processing the subject's data meanwhile,
    and some would finish."""
    with tenant_scope(scope.tenant_id):
        active = (
            AgentRun.objects.filter(run_id__in=scope.run_ids, status__in=["running", "suspended"])
            .exclude(suspend_reason=ERASED_EVENT)
            .values_list("run_id", flat=True)
        )
        for run_id in active:
            apply(
                m.StatusChanged(
                    run_id=run_id,
                    tenant_id=scope.tenant_id,
                    from_statuses=("running", "suspended"),
                    to_status="suspended",
                    event_type="run_suspended",
                    actor=f"erasure:{request_id}",
                    # Codes and ids only: a note here would be searched as the subject's text next time.
                    payload={"reason": ERASED_EVENT, "erasure_request_id": str(request_id)},
                    suspend_reason=ERASED_EVENT,
                    suspend_detail=ERASED_DETAIL,
                )
            )


# What a LangGraph thread's graph asked a person and what the person answered (runs.langgraph's
# events): all of it is the subject's, a three-letter name or an amount as much as a sentence, so
# each question's value and each answer and note is erased whole, not only the texts found elsewhere
# (which leave out short answers: erasure.matching.free_text_value). The interrupts' ids and who answered stay.
LANGGRAPH_ASKED = frozenset({"langgraph_interrupt", "langgraph_interrupt_answered"})


def _langgraph_asked_erased(payload: Any) -> Any:
    if not isinstance(payload, dict):
        return payload
    erased = dict(payload)
    if isinstance(payload.get("interrupts"), list):
        erased["interrupts"] = [
            {**item, "value": ERASED} if isinstance(item, dict) and "value" in item else item
            for item in payload["interrupts"]
        ]
    for key in ("answer", "note"):
        if payload.get(key) not in (None, ""):
            erased[key] = ERASED
    return erased


def _events_redacted(
    run_id: UUID, redact: Redactor
) -> tuple[list[m.EventRedacted], dict[str, dict[str, str]], list[m.EventRedacted]]:
    """The run's events as erasure leaves them: (redacted events, their records by seq, keyed actors).
    Who acted is no digest's input: a keyed actor needs no record."""
    changed: list[m.EventRedacted] = []
    records: dict[str, dict[str, str]] = {}
    renamed: list[m.EventRedacted] = []
    for event in AgentEvent.objects.filter(run_id=run_id).order_by("seq"):
        if redact.hit(event.actor):
            renamed.append(m.EventRedacted(run_id, event.seq, {"actor": erased_id(event.actor)}))
        payload = event.payload
        if event.event_type in LANGGRAPH_ASKED:
            payload = _langgraph_asked_erased(payload)
        if event.event_type in CONVERSATION_EVENTS and "redacted" not in payload:
            kept = {k: v for k, v in payload.items() if k not in TEXT_KEYS}
            payload = {
                **kept,
                "redacted": True,
                "text_digest": keyed_digest({k: payload.get(k) for k in TEXT_KEYS}),
            }
        new = {
            "payload": redact(payload),
            "state": redact(event.state),
            "client_message_id": redact.ident(event.client_message_id),
        }
        old = {"payload": event.payload, "state": event.state, "client_message_id": event.client_message_id}
        if new != old:
            changed.append(m.EventRedacted(run_id, event.seq, new))
            records[str(event.seq)] = {
                "before": keyed_digest(old),  # of the subject's own text: keyed
                "after": redaction_digest(**new),
            }
    return changed, records, renamed


def _events_rewrite(changes: list[m.EventRedacted]) -> int:
    """Each change through the kernel; the caller holds the run's row lock where the change must be
    recorded with it (the redacted events beside their subject_erased event)."""
    return sum(apply(change) for change in changes)


def run_erase(
    *, run_id: UUID, scope: Scope, redact: Redactor, request_id: UUID, subject: str
) -> dict[str, int]:
    """Redact one run in one transaction; its new state goes in with the fenced subject_erased event.

    The run's row is locked first: every event is appended with an update of that row, so while the
    transaction reads the log nothing is added to it, and a worker's step (a message, a LangGraph put)
    waits, then finds the run erased and is refused. (Read first and fenced at the end, a run that
    steps every millisecond would always be ahead.)"""
    actors = 0
    for _ in range(20):  # a deadlock with a writer that locked a side row first: read it again
        try:
            with tenant_scope(scope.tenant_id):
                run = AgentRun.objects.select_for_update().get(run_id=run_id)
                changed, records, renamed = _events_redacted(run_id, redact)
                actors += _events_rewrite(renamed)
                state = redact(run.state)
                result = redact(run.result)
                key = _erased_key(run.idempotency_key, run.run_id, redact)
                if (
                    not changed
                    and state == run.state
                    and result == run.result
                    and run.subject == subject
                    and (key == run.idempotency_key)
                ):
                    break  # nothing left: a second erasure changes nothing
                encoded = state_encode(state)
                seq = apply(
                    m.SubjectErased(
                        run_id=run_id,
                        tenant_id=scope.tenant_id,
                        expected_revision=run.state_revision,
                        state=encoded,
                        subject=subject,
                        result=result,
                        idempotency_key=key,
                        detail=ERASED_DETAIL,
                        old_detail=ERASED if redact.hit(run.suspend_detail) else run.suspend_detail,
                        payload={
                            "erasure_request_id": str(request_id),
                            "redactions": records,
                            "state_digest_before": run.state_digest,
                        },
                        actor=f"erasure:{request_id}",
                    )
                )
                if seq is None:
                    continue
                _events_rewrite(changed)
                approvals = _redact_rows(
                    Approval.objects.filter(run_id=run_id), redact, ("request", "reasons", "note")
                )
                operations = _redact_operations(run_id, redact)
                return {
                    "runs_redacted": 1,
                    "events_redacted": len(changed),
                    "actors_keyed": actors,
                    "approvals_redacted": approvals,
                    "operations_redacted": operations,
                }
        except OperationalError as exc:
            if getattr(exc.__cause__, "sqlstate", None) != DEADLOCK:
                raise
    else:
        raise RuntimeError(f"run {run_id} could not be erased: 20 attempts met a deadlock or a change")
    with tenant_scope(scope.tenant_id):  # the run itself was done before; its side rows may not be
        return {
            "runs_redacted": 0,
            "events_redacted": 0,
            "actors_keyed": actors,
            "approvals_redacted": _redact_rows(
                Approval.objects.filter(run_id=run_id), redact, ("request", "reasons", "note")
            ),
            "operations_redacted": _redact_operations(run_id, redact),
        }


# Payload keys where Keeper's own events copy who acted or held the run (a resume's requested_by,
# the lease's previous_owner).
NAME_KEYS = frozenset({"requested_by", "previous_owner", "answered_by", "decided_by"})


def names_key(scope: Scope, redact: Redactor) -> dict[str, int]:
    """Who acted in a run, decided an approval or holds a lease, where that names the subject: a
    person's own client that records them as the actor of their messages (user:cust-1003), an outside
    worker named after a person. The name becomes a keyed pseudonym (the same for every row that held
    it, so the history still tells one actor from another). In the subject's runs the redactor's rule
    applies (any text the request covers; their events' actors were keyed with the runs, their leases
    ended); in other runs the id or a distinctive text of theirs, as the scan counts it there."""
    with tenant_scope(scope.tenant_id), connection.cursor() as cursor:
        return {
            "actors_keyed": _actors_key(cursor, scope),
            "deciders_keyed": _deciders_key(cursor, scope, redact),
            "leases_released": _leases_release(cursor, scope),
        }


def _actors_key(cursor: Any, scope: Scope) -> int:
    mine, subject = list(scope.run_ids), scope.subject_id
    actor, a = subject_condition("actor", subject, values=scope.values)
    cursor.execute(
        f"SELECT run_id, seq, actor FROM agent_events WHERE tenant_id = %s AND NOT (run_id = ANY(%s::uuid[]))"  # noqa: S608
        f" AND {actor}",
        [scope.tenant_id, mine, *a],
    )
    keyed = _events_rewrite(
        [m.EventRedacted(run, seq, {"actor": erased_id(name)}) for run, seq, name in cursor.fetchall()]
    )
    named = [subject_condition(f"(payload ->> '{k}')", subject, values=scope.values) for k in NAME_KEYS]
    cursor.execute(
        f"SELECT run_id, seq, payload FROM agent_events WHERE tenant_id = %s AND NOT (run_id = ANY(%s::uuid[]))"  # noqa: S608
        f" AND ({' OR '.join(c for c, _ in named)})",
        [scope.tenant_id, mine, *(p for _, ps in named for p in ps)],
    )
    copies = []
    for run, seq, raw in cursor.fetchall():
        payload = json.loads(raw) if isinstance(raw, str | bytes) else raw
        new = {
            k: erased_id(v) if k in NAME_KEYS and isinstance(v, str) and holds_subject(v, scope) else v
            for k, v in payload.items()
        }
        if new != payload:
            copies.append(m.EventRedacted(run, seq, {"payload": new}))
    return keyed + _events_rewrite(copies)


def _deciders_key(cursor: Any, scope: Scope, redact: Redactor) -> int:
    decided, d = subject_condition("decided_by", scope.subject_id, values=scope.values)
    cursor.execute(
        f"SELECT approval_id, run_id, decided_by FROM approvals WHERE tenant_id = %s"  # noqa: S608
        f" AND (run_id = ANY(%s::uuid[]) OR {decided})",
        [scope.tenant_id, list(scope.run_ids), *d],
    )
    n = 0
    for approval_id, run_id, name in cursor.fetchall():
        if run_id not in scope.run_ids or redact.hit(name):
            Approval.objects.filter(approval_id=approval_id).update(decided_by=erased_id(name))
            n += 1
    return n


def _leases_release(cursor: Any, scope: Scope) -> int:
    """A lease held under the subject's name in another run: one that has run out is given back (the
    run is dispatched again); a live one is left to its worker, and the receipt says what to do."""
    owner, o = subject_condition("lease_owner", scope.subject_id, values=scope.values)
    cursor.execute(
        f"SELECT run_id, lease_owner, lease_epoch FROM agent_runs WHERE tenant_id = %s"  # noqa: S608
        f" AND NOT (run_id = ANY(%s::uuid[])) AND lease_expires_at < statement_timestamp() AND {owner}",
        [scope.tenant_id, list(scope.run_ids), *o],
    )
    rows = cursor.fetchall()
    # attempted: the holder that let the lease run out had its try, as when another worker takes it over
    released = (
        apply(m.LeaseReleased(run_id, scope.tenant_id, name, epoch, attempted=True))
        for run_id, name, epoch in rows
    )
    return sum(released)


# An operation with its outcome, or one never sent (prepared; or confirmed not applied, which puts it
# back to prepared): after the erasure its run never continues, so its key is never sent again.
_DECIDED = (OperationStatus.SUCCEEDED, OperationStatus.FAILED, OperationStatus.PREPARED)


def _redact_operations(run_id: UUID, redact: Redactor) -> int:
    """The run's operations: their result and history redacted, an external ref that holds the
    subject's id or text rewritten as an erased id, and so the key of an operation with its outcome
    (an operation keyed note:cust-7781 would otherwise keep every erasure of cust-7781 from
    completing). An operation still in doubt keeps its key: reconciling it sends that key again, and
    another key could apply the side effect twice; the receipt names it until it is reconciled."""
    n = _redact_rows(ToolOperation.objects.filter(run_id=run_id), redact, ("result", "history"))
    for op in ToolOperation.objects.filter(run_id=run_id):
        new: dict[str, Any] = {}
        if op.external_ref and redact.hit(op.external_ref):
            new["external_ref"] = erased_id(op.external_ref)
        if op.status in _DECIDED and redact.hit(op.operation_id):
            new["operation_id"] = erased_id(op.operation_id)
        if new:
            ToolOperation.objects.filter(pk=op.pk).update(**new)
            n += 1
    return n


def _redact_rows(queryset: Any, redact: Redactor, fields: tuple[str, ...]) -> int:
    n = 0
    for row in queryset:
        new = {f: redact(getattr(row, f)) for f in fields}
        if any(new[f] != getattr(row, f) for f in fields):
            type(row).objects.filter(pk=row.pk).update(**new)
            n += 1
    return n
