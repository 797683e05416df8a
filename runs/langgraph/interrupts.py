"""A LangGraph thread's interrupt() answered by a person: read what the graph asks, record the answer once.

No LangGraph import: the saver records each root task's interrupt as a `langgraph_interrupt` event and
puts the run in `langgraph_interrupt`. Tasks of one superstep that interrupt together all wait at once;
each answer is an event keyed by its interrupt id, and the last one moves the run to
`langgraph_answered`, for the worker (a registered graph) or the graph's own process to resume with
the map of every answer (`Command(resume={interrupt_id: answer, ...})`, as LangGraph expects).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from django.db import connection

from core.digests import MAX_JSON_DEPTH, NotJSONSerializable, canonical_json, json_depth_over
from core.errors import InvalidInput
from core.tasks import task_send
from core.tenancy import tenant_bind
from runs.kernel import apply
from runs.kernel import moves as m
from runs.kernel.errors import InvalidState, RunNotFound, SubjectErased
from runs.langgraph.graphs import graph_registered
from runs.langgraph.inbox import inbox_summary
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
class Given:
    """An answer recorded for one interrupt of the thread's interrupted checkpoint."""

    interrupt_id: str
    seq: int
    value: Any
    actor: str


@dataclass(frozen=True)
class ThreadInterrupt:
    """A LangGraph thread's run and what it waits for at its interrupted checkpoint: `asked`, the
    questions no one has answered yet (every task of the superstep that called interrupt()), and
    `answers`, those answered (`open`: a person still has to answer)."""

    run_id: UUID
    tenant_id: UUID
    thread_id: str
    graph: str
    revision: int
    reason: str
    checkpoint_id: str
    asked: list[Asked]
    answers: list[Given] = field(default_factory=list)

    @property
    def open(self) -> bool:
        return self.reason == INTERRUPT_REASON and bool(self.asked)

    @property
    def resume(self) -> dict[str, Any]:
        """The answers by interrupt id (the `Command(resume=...)` value once every question is answered)."""
        return {given.interrupt_id: given.value for given in self.answers}


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
    # Every answer of the interrupted checkpoint by interrupt id, this one included, when the set is
    # complete (the graph can resume); empty while other questions of the superstep wait.
    answers: dict[str, Any] = field(default_factory=dict)

    @property
    def resume(self) -> dict[str, Any]:
        """The `Command(resume=...)` value: every answer of the superstep by interrupt id."""
        return self.answers or {self.interrupt_id: self.value}


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str | bytes) else value


# The run, its graph, and the interrupt and answer events of its latest interrupted checkpoint (the
# checkpoint of its newest interrupt event: the tasks of one superstep all interrupt on it).
_THREAD = """
SELECT r.run_id, r.tenant_id, r.idempotency_key, r.state_revision, r.suspend_reason,
       coalesce(s.payload ->> 'graph', ''), e.checkpoint_id, q.asked, a.given
  FROM agent_runs r
  LEFT JOIN LATERAL (SELECT payload ->> 'checkpoint_id' AS checkpoint_id FROM agent_events
                      WHERE run_id = r.run_id AND tenant_id = r.tenant_id AND event_type = 'langgraph_interrupt'
                      ORDER BY seq DESC LIMIT 1) e ON TRUE
  LEFT JOIN LATERAL (SELECT jsonb_agg(jsonb_build_array(seq, payload -> 'interrupts') ORDER BY seq) AS asked
                       FROM agent_events
                      WHERE run_id = r.run_id AND tenant_id = r.tenant_id AND event_type = 'langgraph_interrupt'
                        AND payload ->> 'checkpoint_id' = e.checkpoint_id) q ON TRUE
  LEFT JOIN LATERAL (SELECT jsonb_agg(jsonb_build_array(seq, payload, actor) ORDER BY seq) AS given
                       FROM agent_events
                      WHERE run_id = r.run_id AND tenant_id = r.tenant_id
                        AND event_type = 'langgraph_interrupt_answered'
                        AND payload ->> 'checkpoint_id' = e.checkpoint_id) a ON TRUE
  LEFT JOIN LATERAL (SELECT payload FROM agent_events
                      WHERE run_id = r.run_id AND tenant_id = r.tenant_id ORDER BY seq LIMIT 1) s ON TRUE
 WHERE r.tenant_id = %(tenant)s AND r.workflow_name = 'langgraph' AND r.status = 'suspended'
   AND r.suspend_reason <> 'subject_erased' AND {where}
"""


def _questions(asked: Any, given: Any) -> tuple[list[Asked], list[Given]]:
    """The questions of the interrupted checkpoint not answered yet, and the answers given. An answer
    counts for the latest time its interrupt was asked (a task asked again after an answer waits
    for a new one)."""
    last_asked: dict[str, tuple[int, Any]] = {}
    for seq, interrupts in _json(asked) or []:
        for item in interrupts or []:
            last_asked[str(item.get("id", ""))] = (seq, item.get("value"))
    answers: dict[str, Given] = {}
    for seq, payload, actor in _json(given) or []:
        data = _json(payload) or {}
        interrupt_id = str(data.get("interrupt_id", ""))
        asked_at = last_asked.get(interrupt_id)
        if asked_at is not None and seq > asked_at[0] and interrupt_id not in answers:
            answers[interrupt_id] = Given(
                interrupt_id, seq, data.get("answer"), data.get("answered_by", actor)
            )
    waiting = [Asked(i, value) for i, (_, value) in last_asked.items() if i not in answers]
    return waiting, sorted(answers.values(), key=lambda g: g.seq)


def thread_interrupt_get(
    *, tenant_id: UUID, run_id: UUID | None = None, thread_id: str | None = None
) -> ThreadInterrupt | None:
    """The thread's run (named by run or thread id) with the questions of its interrupted checkpoint;
    None if the tenant has no such active thread."""
    if run_id is not None:
        rows = _rows(_THREAD.format(where="r.run_id = %(run)s"), {"tenant": tenant_id, "run": run_id})
    else:
        rows = _rows(
            _THREAD.format(where="r.idempotency_key = %(key)s"),
            {"tenant": tenant_id, "key": thread_key(str(thread_id))},
        )
    if not rows:
        return None
    run, tenant, key, revision, reason, graph, checkpoint_id, asked, given = rows[0]
    waiting, answers = _questions(asked, given)
    return ThreadInterrupt(
        run_id=run,
        tenant_id=tenant,
        thread_id=str(key).removeprefix("langgraph:"),
        graph=graph,
        revision=revision,
        reason=reason,
        checkpoint_id=str(checkpoint_id or ""),
        asked=waiting,
        answers=answers,
    )


_ANSWERED = """
SELECT seq, payload, actor FROM agent_events
 WHERE run_id = %(run)s AND tenant_id = %(tenant)s AND event_type = 'langgraph_interrupt_answered'
   AND payload ->> 'checkpoint_id' = %(checkpoint)s AND payload ->> 'interrupt_id' = %(interrupt)s
 ORDER BY seq DESC LIMIT 1
"""


def _answered(thread: ThreadInterrupt, checkpoint_id: str, interrupt_id: str) -> Answer | None:
    """The answer already recorded for this interrupt (a retried request after the thread moved on
    finds it too)."""
    if checkpoint_id != thread.checkpoint_id:
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
    for given in thread.answers:
        if given.interrupt_id == interrupt_id:
            return Answer(
                run_id=thread.run_id,
                thread_id=thread.thread_id,
                seq=given.seq,
                checkpoint_id=checkpoint_id,
                interrupt_id=interrupt_id,
                value=given.value,
                actor=given.actor,
                graph=thread.graph,
                created=False,
            )
    return None


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
    """Record a person's answer to one of the thread's open interrupts (the only one when no ids are
    given). The same interrupt answered again returns the first answer (`created` False) and records
    nothing. When tasks of one superstep interrupted together, each is answered by its id; the last
    answer completes the set and the graph resumes with all of them."""
    _answer_check(answer)
    for _ in range(_ANSWER_ATTEMPTS):
        thread = thread_interrupt_get(tenant_id=tenant_id, run_id=run_id)
        if thread is None:
            if _erased(tenant_id=tenant_id, run_id=run_id):
                raise SubjectErased(f"run {run_id} takes no answers: its subject was erased")
            raise RunNotFound("no such LangGraph thread", code="langgraph_thread_not_found")
        checkpoint = checkpoint_id or thread.checkpoint_id
        if interrupt_id is None and len(thread.asked) != 1:
            if thread.asked:
                raise InvalidState(
                    f"the graph asks {len(thread.asked)} questions: name the one answered (interrupt_id: "
                    + ", ".join(a.interrupt_id for a in thread.asked)
                    + ")",
                    code="langgraph_no_open_interrupt",
                )
            if not thread.answers:
                raise InvalidState("the thread has no interrupt", code="langgraph_no_open_interrupt")
            if checkpoint_id is None and thread.reason != ANSWERED_REASON:
                # Without ids, "the same answer again" holds only while the answer waits for the
                # graph; once the graph went on, the thread waits for no answer (a late answer must
                # not get 200 with the earlier one).
                raise InvalidState(
                    "the thread waits for no answer (answered, and the graph went on)",
                    code="langgraph_no_open_interrupt",
                )
        asked = interrupt_id or (
            thread.asked[0].interrupt_id if thread.asked else thread.answers[-1].interrupt_id
        )
        earlier = _answered(thread, checkpoint, asked)
        if earlier is not None:
            return earlier
        if not thread.open or checkpoint != thread.checkpoint_id:
            raise InvalidState(
                "the thread waits for no answer to that interrupt (answered, moved on, or never asked)",
                code="langgraph_no_open_interrupt",
            )
        if asked not in {a.interrupt_id for a in thread.asked}:
            raise InvalidState(
                "the thread's open interrupt has another id", code="langgraph_no_open_interrupt"
            )
        answered = _answer_record(thread, checkpoint, asked, answer=answer, actor=actor, note=note)
        if answered is None:  # another answer was recorded meanwhile: read the thread again
            continue
        if answered.answers and graph_registered(thread.graph):  # all answered: wake a worker
            task_send(name=RESUME_TASK, args=[str(tenant_id), str(run_id)])
        return answered
    raise InvalidState("the thread moved on; reload and answer again", code="langgraph_no_open_interrupt")


_ANSWER_ATTEMPTS = 5
# LangGraph's serializer (msgpack) keeps integers within 64 bits; a number stored as JSON comes back
# from jsonb as an integer when it is whole (1e20 as 100000000000000000000), so past this size an
# answer would be recorded and then crash the graph's resume.
_ANSWER_NUMBER_LIMIT = 2**63


def _answer_check(answer: Any) -> None:
    """An answer the graph can take: not null (LangGraph reads None as no answer), and no number
    too large for its checkpoints."""
    if answer is None:
        raise InvalidInput("an answer cannot be null (the graph would take it as no answer)")
    if json_depth_over(answer):  # as the API's parser refuses a body (the console's form came through)
        raise InvalidInput(f"an answer may nest at most {MAX_JSON_DEPTH} levels of arrays and objects")
    pending = [answer]
    while pending:
        value = pending.pop()
        if isinstance(value, dict):
            pending.extend(value.values())
        elif isinstance(value, list):
            pending.extend(value)
        elif (
            isinstance(value, int | float)
            and not isinstance(value, bool)
            and abs(value) >= _ANSWER_NUMBER_LIMIT
        ):
            raise InvalidInput(
                f"a number in an answer must be below 2**63 in size ({value:g} is not): the answer is "
                "kept as JSON, which gives such a number back as a whole integer, and the graph's "
                "checkpoints cannot keep an integer that large"
            )


def _erased(*, tenant_id: UUID, run_id: UUID) -> bool:
    """Whether the tenant's LangGraph run was stopped by its subject's erasure (no longer a thread
    anyone answers: its questions and answers are redacted)."""
    return bool(
        _rows(
            "SELECT 1 FROM agent_runs WHERE run_id = %(run)s AND tenant_id = %(tenant)s"
            " AND workflow_name = 'langgraph' AND suspend_reason = 'subject_erased'",
            {"tenant": tenant_id, "run": run_id},
        )
    )


def _answer_record(
    thread: ThreadInterrupt, checkpoint_id: str, interrupt_id: str, *, answer: Any, actor: str, note: str
) -> Answer | None:
    """The answer's event, if the run is still at the revision the thread was read at (None: it is not)."""
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
    waiting = [a for a in thread.asked if a.interrupt_id != interrupt_id]
    if waiting:
        total = len(waiting) + len(thread.answers) + 1
        detail = (
            f"{total - len(waiting)} of {total} questions answered; waiting: {_question(waiting[0].value)}"
        )
    else:
        detail = f"answered by {actor}; the answer waits for the graph to resume"
    # Compare-and-set on the run row: still interrupted, at the revision read with the interrupt (a
    # second click, or an answer racing this one, records nothing). The last answer of the superstep
    # moves the run to langgraph_answered; an earlier one keeps it waiting.
    with tenant_bind(thread.tenant_id):
        seq = apply(
            m.InterruptAnswered(
                run_id=thread.run_id,
                tenant_id=thread.tenant_id,
                expected_revision=thread.revision,
                reason=INTERRUPT_REASON if waiting else ANSWERED_REASON,
                detail=detail[:300],
                payload=json.loads(payload),
                actor=actor,
            )
        )
    if seq is None:
        return None
    return Answer(
        run_id=thread.run_id,
        thread_id=thread.thread_id,
        seq=seq,
        checkpoint_id=checkpoint_id,
        interrupt_id=interrupt_id,
        value=answer,
        actor=actor,
        graph=thread.graph,
        answers={} if waiting else {**thread.resume, interrupt_id: answer},
    )


def _question(value: Any) -> str:
    """A question's line for the inbox: its text, the "question" of a dict, or its JSON."""
    if isinstance(value, dict) and isinstance(value.get("question"), str):
        return value["question"]
    if (line := inbox_summary(value)) is not None:
        return line
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


def answer_pending_get(
    *, tenant_id: UUID, run_id: UUID | None = None, thread_id: str | None = None
) -> Answer | None:
    """The answers people gave that the graph has not resumed with yet, once every question of the
    superstep is answered (None: nothing waits). `resume` maps each interrupt id to its answer; the
    other fields are the last answer's."""
    thread = thread_interrupt_get(tenant_id=tenant_id, run_id=run_id, thread_id=thread_id)
    if thread is None or thread.reason != ANSWERED_REASON or thread.asked or not thread.answers:
        return None
    last = thread.answers[-1]
    return Answer(
        run_id=thread.run_id,
        thread_id=thread.thread_id,
        seq=last.seq,
        checkpoint_id=thread.checkpoint_id,
        interrupt_id=last.interrupt_id,
        value=last.value,
        actor=last.actor,
        graph=thread.graph,
        answers=thread.resume,
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
    "Given",
    "ThreadInterrupt",
    "answer_pending_get",
    "answered_redispatch",
    "interrupt_answer",
    "thread_interrupt_get",
]
