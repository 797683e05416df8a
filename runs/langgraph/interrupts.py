"""A LangGraph thread's interrupt() answered by a person: read what the graph asks, record the answer once.

No LangGraph import: the saver records each root interrupt as a `langgraph_interrupt` event and puts
the run in `langgraph_interrupt`; answering moves it to `langgraph_answered` with an event that holds
the answer, for the worker (a registered graph) or the graph's own process to resume with.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from django.db import connection

from core.digests import NotJSONSerializable, canonical_json
from core.tasks import task_send
from runs.engine.errors import InvalidState, RunNotFound
from runs.langgraph.graphs import graph_registered
from runs.langgraph.store import (
    ANSWERED_EVENT,
    ANSWERED_REASON,
    INTERRUPT_EVENT,
    INTERRUPT_REASON,
    _rows,
    thread_key,
)

ANSWER_MAX_BYTES = 64 * 1024
RESUME_TASK = "workers.tasks.resume_langgraph_thread"
logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Asked:
    """One interrupt of a thread's latest interrupt event: its id and the value the graph passed."""

    interrupt_id: str
    value: Any


@dataclass(frozen=True)
class ThreadInterrupt:
    """A LangGraph thread's run and what it waits for (`open`: a person has to answer)."""

    run_id: UUID
    tenant_id: UUID
    thread_id: str
    graph: str
    revision: int
    reason: str
    checkpoint_id: str
    asked: list[Asked]

    @property
    def open(self) -> bool:
        return self.reason == INTERRUPT_REASON and bool(self.asked)


@dataclass(frozen=True)
class Answer:
    """A recorded answer; `created` is False when the same interrupt had been answered already."""

    run_id: UUID
    thread_id: str
    seq: int
    checkpoint_id: str
    interrupt_id: str
    value: Any
    actor: str
    graph: str
    created: bool = True

    @property
    def resume(self) -> dict[str, Any]:
        """The `Command(resume=...)` value: the answer by interrupt id."""
        return {self.interrupt_id: self.value}


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str | bytes) else value


_THREAD = """
SELECT r.run_id, r.tenant_id, r.idempotency_key, r.state_revision, r.suspend_reason, e.payload,
       coalesce(s.payload ->> 'graph', '')
  FROM agent_runs r
  LEFT JOIN LATERAL (SELECT payload FROM agent_events
                      WHERE run_id = r.run_id AND tenant_id = r.tenant_id AND event_type = 'langgraph_interrupt'
                      ORDER BY seq DESC LIMIT 1) e ON TRUE
  LEFT JOIN LATERAL (SELECT payload FROM agent_events
                      WHERE run_id = r.run_id AND tenant_id = r.tenant_id ORDER BY seq LIMIT 1) s ON TRUE
 WHERE r.tenant_id = %(tenant)s AND r.workflow_name = 'langgraph' AND r.status = 'suspended' AND {where}
"""


def thread_interrupt_get(
    *, tenant_id: UUID, run_id: UUID | None = None, thread_id: str | None = None
) -> ThreadInterrupt | None:
    """The thread's run (named by run or thread id) with its latest interrupt; None if the tenant has
    no such active thread."""
    if run_id is not None:
        rows = _rows(_THREAD.format(where="r.run_id = %(run)s"), {"tenant": tenant_id, "run": run_id})
    else:
        rows = _rows(
            _THREAD.format(where="r.idempotency_key = %(key)s"),
            {"tenant": tenant_id, "key": thread_key(str(thread_id))},
        )
    if not rows:
        return None
    run, tenant, key, revision, reason, payload, graph = rows[0]
    event = _json(payload) or {}
    return ThreadInterrupt(
        run_id=run,
        tenant_id=tenant,
        thread_id=str(key).removeprefix("langgraph:"),
        graph=graph,
        revision=revision,
        reason=reason,
        checkpoint_id=str(event.get("checkpoint_id", "")),
        asked=[Asked(str(i.get("id", "")), i.get("value")) for i in event.get("interrupts", [])],
    )


_ANSWERED = """
SELECT seq, payload, actor FROM agent_events
 WHERE run_id = %(run)s AND tenant_id = %(tenant)s AND event_type = 'langgraph_interrupt_answered'
   AND payload ->> 'checkpoint_id' = %(checkpoint)s AND payload ->> 'interrupt_id' = %(interrupt)s
 ORDER BY seq DESC LIMIT 1
"""


def _answered(thread: ThreadInterrupt, checkpoint_id: str, interrupt_id: str) -> Answer | None:
    rows = _rows(
        _ANSWERED,
        {
            "tenant": thread.tenant_id,
            "run": thread.run_id,
            "checkpoint": checkpoint_id,
            "interrupt": interrupt_id,
        },
    )
    if not rows:
        return None
    seq, payload, actor = rows[0]
    data = _json(payload)
    return Answer(
        run_id=thread.run_id,
        thread_id=thread.thread_id,
        seq=seq,
        checkpoint_id=checkpoint_id,
        interrupt_id=interrupt_id,
        value=data.get("answer"),
        actor=data.get("answered_by", actor),
        graph=thread.graph,
        created=False,
    )


# Compare-and-set on the run row: still interrupted, at the revision read with the interrupt (a
# second click, or an answer racing this one, changes neither and so records nothing).
_ANSWER = """
WITH u AS (
  UPDATE agent_runs
     SET state_revision = state_revision + 1, updated_at = statement_timestamp(),
         suspend_reason = 'langgraph_answered', suspend_detail = %(detail)s
   WHERE run_id = %(run)s AND tenant_id = %(tenant)s AND status = 'suspended'
     AND suspend_reason = 'langgraph_interrupt' AND state_revision = %(revision)s AND NOT imported
  RETURNING run_id, tenant_id, state_revision, state_digest, next_step)
INSERT INTO agent_events (run_id, tenant_id, seq, event_type, step_id, attempt, payload, actor,
                          state_revision, state_digest, state, next_step, created_at)
SELECT u.run_id, u.tenant_id, u.state_revision, 'langgraph_interrupt_answered', NULL, NULL,
       %(payload)s::jsonb, %(actor)s, u.state_revision, u.state_digest, NULL, u.next_step, statement_timestamp()
  FROM u
RETURNING seq
"""


def interrupt_answer(
    *,
    tenant_id: UUID,
    run_id: UUID,
    answer: Any,
    actor: str,
    checkpoint_id: str | None = None,
    interrupt_id: str | None = None,
    note: str = "",
) -> Answer:
    """Record a person's answer to the thread's open interrupt (the latest one when no ids are given).
    The same interrupt answered again returns the first answer (`created` False) and records nothing."""
    thread = thread_interrupt_get(tenant_id=tenant_id, run_id=run_id)
    if thread is None:
        raise RunNotFound("no such LangGraph thread", code="langgraph_thread_not_found")
    checkpoint_id = checkpoint_id or thread.checkpoint_id
    if interrupt_id is None:
        if len(thread.asked) != 1:
            raise InvalidState(
                "name the interrupt to answer (interrupt_id)"
                if thread.asked
                else "the thread has no interrupt",
                code="langgraph_no_open_interrupt",
            )
        interrupt_id = thread.asked[0].interrupt_id
    earlier = _answered(thread, checkpoint_id, interrupt_id)
    if earlier is not None:
        return earlier
    if not thread.open or checkpoint_id != thread.checkpoint_id:
        raise InvalidState(
            "the thread waits for no answer to that interrupt (answered, moved on, or never asked)",
            code="langgraph_no_open_interrupt",
        )
    if interrupt_id not in {a.interrupt_id for a in thread.asked}:
        raise InvalidState("the thread's open interrupt has another id", code="langgraph_no_open_interrupt")
    try:
        payload = canonical_json(
            {
                "checkpoint_id": checkpoint_id,
                "interrupt_id": interrupt_id,
                "answer": answer,
                "answered_by": actor,
                "note": note,
            }
        )
    except NotJSONSerializable as exc:
        raise InvalidState(f"the answer is not JSON: {exc.message}", code="langgraph_answer_invalid") from exc
    if len(payload.encode()) > ANSWER_MAX_BYTES:
        raise InvalidState(
            f"the answer is larger than {ANSWER_MAX_BYTES} bytes", code="langgraph_answer_too_large"
        )
    rows = _rows(
        _ANSWER,
        {
            "tenant": tenant_id,
            "run": run_id,
            "revision": thread.revision,
            "detail": f"answered by {actor}; the answer waits for the graph to resume"[:300],
            "payload": payload,
            "actor": actor,
        },
    )
    if not rows:  # another answer won the race: the same interrupt gives the first answer back
        earlier = _answered(thread, checkpoint_id, interrupt_id)
        if earlier is not None:
            return earlier
        raise InvalidState("the thread moved on; reload and answer again", code="langgraph_no_open_interrupt")
    answered = Answer(
        run_id=run_id,
        thread_id=thread.thread_id,
        seq=rows[0][0],
        checkpoint_id=checkpoint_id,
        interrupt_id=interrupt_id,
        value=answer,
        actor=actor,
        graph=thread.graph,
    )
    if graph_registered(thread.graph):  # a graph Keeper's workers can resume: wake one
        task_send(name=RESUME_TASK, args=[str(tenant_id), str(run_id)])
    return answered


_PENDING = """
SELECT e.seq, e.payload, e.actor FROM agent_runs r
  JOIN LATERAL (SELECT seq, payload, actor FROM agent_events
                 WHERE run_id = r.run_id AND tenant_id = r.tenant_id AND event_type = 'langgraph_interrupt_answered'
                 ORDER BY seq DESC LIMIT 1) e ON TRUE
 WHERE r.run_id = %(run)s AND r.tenant_id = %(tenant)s AND r.status = 'suspended'
   AND r.suspend_reason = 'langgraph_answered'
"""


def answer_pending_get(
    *, tenant_id: UUID, run_id: UUID | None = None, thread_id: str | None = None
) -> Answer | None:
    """The answer a person gave that the graph has not resumed with yet (None: nothing waits)."""
    thread = thread_interrupt_get(tenant_id=tenant_id, run_id=run_id, thread_id=thread_id)
    if thread is None or thread.reason != ANSWERED_REASON:
        return None
    rows = _rows(_PENDING, {"tenant": tenant_id, "run": thread.run_id})
    if not rows:
        return None
    seq, payload, actor = rows[0]
    data = _json(payload)
    return Answer(
        run_id=thread.run_id,
        thread_id=thread.thread_id,
        seq=seq,
        checkpoint_id=str(data.get("checkpoint_id", "")),
        interrupt_id=str(data.get("interrupt_id", "")),
        value=data.get("answer"),
        actor=data.get("answered_by", actor),
        graph=thread.graph,
    )


_CLAIM_ANSWERED = "SELECT run_id, tenant_id FROM keeper_langgraph_answered_claim(%s, %s)"


def answered_redispatch(*, grace: float, limit: int = 200) -> int:
    """Wake a worker again for answered threads of registered graphs whose resume was lost (the
    broker dropped the task, or the worker died before it began). The claim marks each run
    dispatched, so one is re-sent at most once per `grace`; a resume already under way holds the
    run's advisory lock and a second delivery does nothing. Returns how many were sent."""
    with connection.cursor() as cursor:
        cursor.execute(_CLAIM_ANSWERED, [grace, limit])
        claimed = cursor.fetchall()
    sent = 0
    for run_id, tenant_id in claimed:
        answer = answer_pending_get(tenant_id=tenant_id, run_id=run_id)
        if answer is not None and graph_registered(answer.graph):
            sent += task_send(name=RESUME_TASK, args=[str(tenant_id), str(run_id)])
    if sent:
        logger.info("sweep: re-sent the resume of %d answered LangGraph thread(s)", sent)
    return sent


__all__ = [
    "ANSWERED_EVENT",
    "INTERRUPT_EVENT",
    "Answer",
    "Asked",
    "ThreadInterrupt",
    "answer_pending_get",
    "answered_redispatch",
    "interrupt_answer",
    "thread_interrupt_get",
]
