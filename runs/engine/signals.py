"""Signals and queries of authored workflows: a named outside event sent to a run (recorded as a
`signal_received` event, idempotent by key, waking a run that waits for it) and read-only views."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NoReturn
from uuid import UUID

from django.db import IntegrityError, transaction

from core.digests import NotJSONSerializable, canonical_json
from core.errors import Conflict, InvalidInput, NotFound
from core.tenancy import tenant_of_call
from runs.engine import store
from runs.engine.authoring.context import signal_wait_detail
from runs.engine.authoring.definition import Definition, authored
from runs.engine.dispatch import run_enqueue_on_commit
from runs.engine.errors import InvalidTransition, RunNotFound, SubjectErased, UnknownWorkflow
from runs.engine.models import SUBJECT_ERASED, AgentEvent, AgentRun, RunStatus
from runs.engine.registry import registry

MAX_SIGNAL_KEY_LENGTH = 200
MAX_SIGNAL_PAYLOAD_CHARS = 100_000
_KEY_PREFIX = "signal:"  # signals share the run's unique client_message_id index with messages


class UnknownSignal(InvalidInput):
    code = "unknown_signal"


class UnknownQuery(NotFound):
    code = "unknown_query"


class QueryFailed(Conflict):
    code = "query_failed"


class RunFinished(Conflict):
    code = "run_finished"


@dataclass(frozen=True)
class SignalSent:
    event: AgentEvent
    created: bool
    woke: bool


def _definition(run: AgentRun) -> Definition[Any] | None:
    return authored(run.workflow_name, run.workflow_version)


def _declared(run: AgentRun) -> frozenset[str]:
    """The signals a workflow not written with the authoring API declares (an external workflow's
    registration lists them): none when its version is not known here."""
    try:
        return registry.get(run.workflow_name, run.workflow_version).signals
    except UnknownWorkflow:
        return frozenset()


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
    definition = _definition(run)
    accepted = definition.signal_names if definition is not None else _declared(run)
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
            delivered = store.signal_deliver(
                run_id=run_id,
                tenant_id=run.tenant_id,
                waiting_detail=signal_wait_detail(name),
                payload_json=payload_json,
                actor=actor,
                idempotency_key=key,
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
    definition = _definition(run)
    if definition is None or name not in definition.query_names():
        raise UnknownQuery(
            f"workflow {run.workflow_name} {run.workflow_version} declares no query {name!r}",
            details={"queries": sorted(definition.query_names()) if definition is not None else []},
        )
    try:
        answer = definition.query_run(name, _current_state(run))
        canonical_json(answer)
    except Exception as exc:  # the author's query broke on this state (e.g. a redacted one): say so
        raise QueryFailed(
            f"query {name!r} of {run.workflow_name} {run.workflow_version} failed on this run's state: "
            f"{type(exc).__name__}: {exc}"[:1000],
        ) from None
    return answer
