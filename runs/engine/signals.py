"""Signals and queries of authored workflows: a named outside event sent to a run (recorded as a
`signal_received` event, idempotent by key, waking a run that waits for it) and read-only views."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NoReturn
from uuid import UUID

from django.db import IntegrityError, transaction

from core.digests import NotJSONSerializable, canonical_json
from core.errors import Conflict, InvalidInput, NotFound
from core.tenancy import tenant_of_call
from runs.engine.dispatch import run_enqueue_on_commit
from runs.engine.registry import registry
from runs.kernel import apply
from runs.kernel import moves as m
from runs.kernel.errors import InvalidTransition, RunNotFound, SubjectErased, UnknownWorkflow
from runs.kernel.models import SUBJECT_ERASED, AgentEvent, AgentRun, RunStatus

MAX_SIGNAL_KEY_LENGTH = 200
MAX_SIGNAL_PAYLOAD_CHARS = 100_000
_KEY_PREFIX = "signal:"  # signals share the run's unique client_message_id index with messages


class UnknownSignal(InvalidInput):
    code = "unknown_signal"


class UnknownQuery(NotFound):
    code = "unknown_query"


class QueryFailed(Conflict):
    code = "query_failed"


class CodeUnavailable(Conflict):
    code = "workflow_version_unavailable"


class RunFinished(Conflict):
    code = "run_finished"


@dataclass(frozen=True)
class SignalSent:
    event: AgentEvent
    created: bool
    woke: bool


def signal_wait_detail(name: str) -> str:
    """The suspend detail of a run waiting for signal `name` (the signal API matches it exactly)."""
    return f"waiting for signal {name}"


def _declared(run: AgentRun) -> frozenset[str]:
    """The signals the run's workflow version accepts (declared with the authoring API, or listed by
    an external workflow's registration). When this deployment lacks that version, what the run's
    definition declared when it started (its first event keeps it): a signal is kept for the run
    until its code is back, never dropped."""
    try:
        return registry.get(run.workflow_name, run.workflow_version).signals
    except UnknownWorkflow:
        return _recorded_signals(run)


def _recorded_signals(run: AgentRun) -> frozenset[str]:
    root = run
    for _ in range(10_000):  # a fork's definition is its first ancestor's
        if root.parent_run_id is None:
            break
        parent = AgentRun.objects.filter(run_id=root.parent_run_id, tenant_id=run.tenant_id).first()
        if parent is None:
            break
        root = parent
    first = (
        AgentEvent.objects.filter(run_id=root.run_id, tenant_id=run.tenant_id, seq=1)
        .values_list("payload", flat=True)
        .first()
    )
    signals = (first or {}).get("signals") if isinstance(first, dict) else None
    return frozenset(s for s in signals or () if isinstance(s, str))


def _queries(run: AgentRun) -> Mapping[str, Callable[[Any], Any]]:
    try:
        return registry.get(run.workflow_name, run.workflow_version).queries
    except UnknownWorkflow:
        raise CodeUnavailable(
            f"workflow {run.workflow_name} {run.workflow_version} is not deployed here: its queries run its "
            "code; ask again once a deployment has it",
            details={"workflow": run.workflow_name, "workflow_version": run.workflow_version},
        ) from None


def _current_state(run: AgentRun) -> Any:
    """The state as the run's next step will read it: a checkpoint of an older schema migrated in
    memory (the stored one stays as it is until a step commits the migration), so a query written for
    the current schema answers on a run suspended before the deploy."""
    try:
        workflow = registry.get(run.workflow_name, run.workflow_version)
    except UnknownWorkflow:
        return run.state
    if workflow.schemas is None or run.state_schema_version == workflow.state_schema_version:
        return run.state
    return workflow.schemas.migrate(run.state, run.state_schema_version).state


@tenant_of_call
def signal_send(*, run_id: UUID, name: str, payload: Any, idempotency_key: str, actor: str) -> SignalSent:
    """Deliver signal `name` to the run once per idempotency key (the same key again returns the
    first event and stores nothing; with another signal or payload it is a 409)."""
    if not isinstance(idempotency_key, str) or not 0 < len(idempotency_key.strip()) <= MAX_SIGNAL_KEY_LENGTH:
        raise InvalidInput(
            f"a signal needs an Idempotency-Key header of 1 to {MAX_SIGNAL_KEY_LENGTH} characters",
            code="invalid_idempotency_key",
        )
    run = AgentRun.objects.filter(run_id=run_id).first()
    if run is None:
        raise RunNotFound(f"no run {run_id}")
    accepted = _declared(run)
    if name not in accepted:
        raise UnknownSignal(
            f"workflow {run.workflow_name} {run.workflow_version} accepts no signal {name!r}"
            + (f"; it accepts {', '.join(sorted(accepted))}" if accepted else "; it declares no signals"),
            details={"accepted": sorted(accepted)},
        )
    try:
        body = {"signal": name, "payload": payload, "idempotency_key": idempotency_key}
        payload_json = canonical_json(body)
    except NotJSONSerializable as exc:
        raise InvalidInput(f"the signal payload is not JSON: {exc}", code="invalid_payload") from None
    if len(payload_json) > MAX_SIGNAL_PAYLOAD_CHARS:
        raise InvalidInput(
            f"a signal payload is at most {MAX_SIGNAL_PAYLOAD_CHARS} characters", code="payload_too_large"
        )
    key = _KEY_PREFIX + idempotency_key
    existing = AgentEvent.objects.filter(run_id=run_id, client_message_id=key).first()
    if existing is not None:
        return _the_same_again(existing, body)
    try:
        with transaction.atomic():
            delivered = apply(
                m.SignalDelivered(run_id, run.tenant_id, signal_wait_detail(name), body, actor, key)
            )
            if delivered is None:
                _refuse(run_id)
            seq, woke = delivered
            if woke:
                run_enqueue_on_commit(run_id=run_id)
    except IntegrityError:  # the same key, sent concurrently: that one stands
        return _the_same_again(AgentEvent.objects.get(run_id=run_id, client_message_id=key), body)
    return SignalSent(AgentEvent.objects.get(run_id=run_id, seq=seq), created=True, woke=woke)


def _refuse(run_id: UUID) -> NoReturn:
    run = AgentRun.objects.get(run_id=run_id)
    if run.suspend_reason == SUBJECT_ERASED:
        raise SubjectErased(
            f"run {run_id} takes no signals: its subject was erased",
            details={"status": run.status, "suspend_reason": run.suspend_reason},
        )
    if run.status not in (RunStatus.RUNNING, RunStatus.SUSPENDED):
        raise RunFinished(
            f"run {run_id} is {run.status}; signals go to running or suspended runs",
            details={"status": run.status},
        )
    raise InvalidTransition(f"run {run_id} takes no signals (imported)", details={"status": run.status})


def _the_same_again(existing: AgentEvent, body: dict[str, Any]) -> SignalSent:
    if existing.event_type != "signal_received" or any(existing.payload.get(k) != v for k, v in body.items()):
        raise Conflict(
            f"idempotency key {body['idempotency_key']!r} was already used on this run for another "
            f"signal (event {existing.seq}); send a new key for a new signal",
            code="idempotency_key_reused",
            details={"seq": existing.seq},
        )
    return SignalSent(existing, created=False, woke=False)


@tenant_of_call
def query_read(*, run_id: UUID, name: str) -> Any:
    """The answer of the run's declared query `name` on its stored state; changes nothing."""
    run = AgentRun.objects.filter(run_id=run_id).first()
    if run is None:
        raise RunNotFound(f"no run {run_id}")
    queries = _queries(run)
    if name not in queries:
        raise UnknownQuery(
            f"workflow {run.workflow_name} {run.workflow_version} declares no query {name!r}",
            details={"queries": sorted(queries)},
        )
    try:
        answer = queries[name](_current_state(run))
        canonical_json(answer)
    except Exception as exc:  # the author's query broke on this state (e.g. a redacted one): say so
        raise QueryFailed(
            f"query {name!r} of {run.workflow_name} {run.workflow_version} failed on this run's state: "
            f"{type(exc).__name__}: {exc}"[:1000],
        ) from None
    return answer
