"""One table of step situations, run through both drivers of the kernel: Keeper's own worker and an outside
worker over HTTP (the Python client against a live server). Both must write the same events.

Each case's steps follow a script kept in the run's input, so the same behaviour runs in Keeper's process
(a workflow in code) and in the outside worker (an external workflow of the same steps).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

import pytest
from django.db import connection

from core.api_auth import api_key_create
from core.digests import json_digest
from core.tenancy import run_tenant, tenant_bind
from runs.engine.approvals import approval_approve, approval_check
from runs.engine.operations import operation_mark_started, operation_prepare_once
from runs.engine.registry import Step, StepContext, ToolContract, ToolLookup, Workflow, registry
from runs.engine.runs import run_resume, run_start
from runs.engine.signals import signal_send, signal_wait_detail
from runs.engine.steps import run_advance
from runs.external.workflows import external_workflow_register
from runs.kernel import apply
from runs.kernel import moves as m
from runs.kernel.models import AgentEvent, AgentRun
from runs.kernel.outcomes import Complete, Fail, Next, Suspend
from tests.runs.external.conftest import key_client  # noqa: F401 - puts clients/python on the path

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

STEPS = ("start", "act", "finish")
TOOL = "twin.pay"  # Keeper's own tool (its lookup is in code); the outside worker's is TOOL + ".ext"
LOOKUPS: dict[str, ToolLookup] = {}  # what the outside system answers, per operation id (both drivers)
LOST: set[str] = set()  # runs whose step already lost its lease once


def _script(state: dict[str, Any], step: str) -> dict[str, Any]:
    """The step's scripted action: by default the next step, and the last one completes."""
    if step in state["script"]:
        return dict(state["script"][step])
    later = STEPS[STEPS.index(step) + 1 :]
    return {"do": "next", "to": later[0]} if later else {"do": "complete"}


def _act(
    state: dict[str, Any], step: str, run_id: str, approval: Callable[[dict[str, Any]], tuple[str, Any, str]]
) -> Any:
    """What a step decides, in either driver. `approval(request)` asks the driver's approval call."""
    action = _script(state, step)
    do = action["do"]
    if do == "next":
        return Next(state, action["to"])
    if do == "complete":
        return Complete(state, action.get("result"))
    if do == "fail":
        return Fail(state, action["code"], "scripted")
    if do == "suspend":
        return Suspend(state, action["reason"], action.get("detail", ""))
    if do == "signal":
        if state.get("signalled"):
            return Next(state, action["to"])
        return Suspend({**state, "signalled": True}, "signal", signal_wait_detail(action["name"]))
    if do == "lose_lease":  # another worker takes the run over while this step runs
        if run_id not in LOST:
            LOST.add(run_id)
            _expire(UUID(run_id))
            tenant_id = run_tenant(UUID(run_id))
            assert tenant_id is not None
            apply(m.LeaseTaken(UUID(run_id), tenant_id, "thief", 0.05, external=action["outside"]))
            time.sleep(0.1)
        return Next(state, action["to"])
    if do == "approval":
        verdict, approval_id, digest = approval(action["request"])
        if verdict == "use":
            return Next(state, action["to"])
        if verdict == "rejected":
            return Fail(state, "approval_rejected", "")
        waiting = {**state, "approval": {"approval_id": str(approval_id)}, "request_digest": digest}
        return Suspend(waiting, "approval_required", "waiting for a person", action["to"])
    raise AssertionError(f"unknown scripted action {do}")


def _expire(run_id: UUID) -> None:
    with connection.cursor() as cursor:  # the holder's lease runs out (as if it paused past its TTL)
        cursor.execute(
            "UPDATE agent_runs SET lease_expires_at = now() - interval '1 second' WHERE run_id = %s", [run_id]
        )


def _keeper_step(ctx: StepContext, state: dict[str, Any]) -> Any:
    def approval(request: dict[str, Any]) -> tuple[str, Any, str]:
        check = approval_check(
            run_id=ctx.run_id,
            tenant_id=ctx.tenant_id,
            step_id=ctx.step,
            request=request,
            request_digest=json_digest(request),
            reasons=[],
            actor="twin",
        )
        return check.verdict, check.approval.approval_id, check.approval.request_digest

    return _act(state, ctx.step, str(ctx.run_id), approval)


def _lookup(operation_id: str) -> ToolLookup | None:
    return LOOKUPS.get(operation_id)


registry.register(
    Workflow(
        name="twin",
        version="1",
        steps=tuple(Step(name, _keeper_step) for name in STEPS),
        approval_guarded_steps=frozenset({"finish"}),
        signals=frozenset({"go"}),
    )
)
registry.register_tool(ToolContract(TOOL, "v1", lookup=_lookup))


class Outside:
    """An outside worker: the Python client over real HTTP, one step per claim."""

    def __init__(self, url: str, key: str):
        from keeper_client import KeeperClient, KeeperConflict

        self.client = KeeperClient(url, key, retries=0)
        self.conflict = KeeperConflict

    def advance(self) -> bool:
        claim = self.client.claim(["twin.ext"], wait_seconds=0, worker_id="outside")
        if claim is None:
            return False
        if claim.lookups_needed:
            answers = {}
            for op in claim.operations_in_doubt:
                found = LOOKUPS.get(op["operation_id"])
                answers[op["operation_id"]] = (
                    {
                        "authoritative": found.authoritative,
                        "applied": found.applied,
                        "external_ref": found.external_ref,
                    }
                    if found is not None
                    else {"authoritative": False, "applied": None}
                )
            try:
                claim = self.client.lookups(claim, answers)
            except self.conflict:
                return True

        def approval(request: dict[str, Any]) -> tuple[str, Any, str]:
            answer = self.client.approval(claim, request)
            return answer["verdict"], answer["approval_id"], answer["request_digest"]

        outcome = _act(dict(claim.state), claim.step, claim.run_id, approval)
        try:
            if isinstance(outcome, Next):
                self.client.commit(claim, outcome.state, next_step=outcome.step)
            elif isinstance(outcome, Suspend):
                body = {"reason": outcome.reason, "detail": outcome.detail}
                if outcome.step:
                    body["step"] = outcome.step
                self.client.commit(claim, outcome.state, suspend=body)
            elif isinstance(outcome, Complete):
                self.client.commit(claim, outcome.state, complete={"result": outcome.result})
            else:
                self.client.commit(
                    claim, outcome.state, fail={"code": outcome.code, "detail": outcome.detail}
                )
        except self.conflict:
            pass
        return True


@dataclass
class Case:
    name: str
    script: dict[str, Any] = field(default_factory=dict)
    budgets: dict[str, Any] | None = None
    before: Callable[[AgentRun, bool], None] | None = None  # (run, outside) before the driver runs
    between: Callable[[AgentRun], None] | None = None  # after the driver stops; then it runs again


def _dead_lease(run: AgentRun, outside: bool, *, ttl: float = 0.05) -> Any:
    grant = apply(
        m.LeaseTaken(run.run_id, run.tenant_id, f"dead-{time.monotonic_ns()}", ttl, external=outside)
    )
    assert grant is not None
    time.sleep(ttl + 0.05)
    return grant


def _takeover(run: AgentRun, outside: bool) -> None:
    _dead_lease(run, outside)


def _too_many_attempts(run: AgentRun, outside: bool) -> None:
    from django.conf import settings

    for _ in range(settings.KEEPER_MAX_ATTEMPTS):
        _dead_lease(run, outside, ttl=0.02)


def _changed_outside(**change: Any) -> Callable[[AgentRun], None]:
    """Someone edits the suspended run's row by hand, then a person resumes it."""

    def between(run: AgentRun) -> None:
        state = {**run.state, **change["state"]} if "state" in change else None
        apply(m.StateAlteredOutside(run.run_id, run.tenant_id, state, change.get("state_schema_version")))
        run_resume(run_id=run.run_id, actor="user:eng", note="try it")

    return between


def _in_doubt(answer: ToolLookup | None) -> Callable[[AgentRun, bool], None]:
    """A worker prepared and started an operation, then died: its lease runs out."""

    def before(run: AgentRun, outside: bool) -> None:
        grant = _dead_lease(run, outside, ttl=30)
        op_id = f"pay:{run.run_id}"
        operation_prepare_once(
            tenant_id=run.tenant_id,
            run_id=run.run_id,
            step_id="start",
            operation_id=op_id,
            tool_name=TOOL + (".ext" if outside else ""),
            tool_contract_version="v1",
            request={"amount": 5},
            actor=grant.owner,
        )
        operation_mark_started(
            tenant_id=run.tenant_id,
            operation_id=op_id,
            actor=grant.owner,
            run_id=run.run_id,
            lease_epoch=grant.epoch,
        )
        _expire(run.run_id)
        if answer is not None:
            LOOKUPS[op_id] = answer

    return before


def _signal(run: AgentRun) -> None:
    signal_send(run_id=run.run_id, name="go", payload={}, idempotency_key="k1", actor="user:app")


def _approve(run: AgentRun) -> None:
    approval = run.approvals.get(status="pending")
    approval_approve(approval_id=approval.approval_id, actor="user:sam", note="fine")


CASES = [
    Case("fresh steps to completion", {"finish": {"do": "complete", "result": {"ok": True}}}),
    Case("a step fails the run", {"act": {"do": "fail", "code": "no_stock"}}),
    Case("a step suspends for a person", {"act": {"do": "suspend", "reason": "needs_review"}}),
    Case("a lease taken over after a crash", {"finish": {"do": "complete"}}, before=_takeover),
    Case("too many attempts", before=_too_many_attempts),
    Case("a step budget", {"finish": {"do": "complete"}}, budgets={"steps": 1}),
    Case("a deadline", budgets={"deadline_s": 0.001}, before=lambda run, outside: time.sleep(0.05)),
    Case(
        "resume refused: the state changed outside the engine",
        {"act": {"do": "suspend", "reason": "hold"}},
        between=_changed_outside(state={"tampered": True}),
    ),
    Case(
        "resume refused: a checkpoint of a schema this code lacks",
        {"act": {"do": "suspend", "reason": "hold"}},
        between=_changed_outside(state_schema_version=99),
    ),
    Case(
        "an operation in doubt, an authoritative lookup says applied",
        {"finish": {"do": "complete"}},
        before=_in_doubt(ToolLookup(True, True, "pay_1")),
    ),
    Case(
        "an operation in doubt, the lookup cannot tell",
        before=_in_doubt(ToolLookup(False, None)),
    ),
    Case("an operation in doubt with no lookup at all", before=_in_doubt(None)),
    Case(
        "the lease is lost mid-step",
        {"act": {"do": "lose_lease", "to": "finish"}, "finish": {"do": "complete"}},
    ),
    Case(
        "a signal wakes the run",
        {"act": {"do": "signal", "name": "go", "to": "finish"}, "finish": {"do": "complete"}},
        between=_signal,
    ),
    Case(
        "an approval resumes the run, verified",
        {"act": {"do": "approval", "request": {"amount": 5}, "to": "finish"}, "finish": {"do": "complete"}},
        between=_approve,
    ),
]


def _normalized(run_id: UUID) -> list[tuple[Any, ...]]:
    """What both drivers must agree on: each event's type, step, next step, and reason or code, and for
    a resume verification its trigger and the code of each check."""
    rows = []
    for e in AgentEvent.objects.filter(run_id=run_id).order_by("seq"):
        p = e.payload or {}
        checks = tuple((c["name"], c["ok"], c["code"]) for c in p.get("checks", []))
        rows.append((e.seq, e.event_type, e.step_id, e.next_step, p.get("reason") or p.get("code"),
                     p.get("trigger"), checks))  # fmt: skip
    return rows


def _drive(advance: Callable[[], bool]) -> None:
    for _ in range(20):
        if not advance():
            return


def _run_case(
    case: Case, tenant: Any, outside: Outside | None
) -> tuple[list[tuple[Any, ...]], tuple[str, str]]:
    workflow = "twin.ext" if outside is not None else "twin"
    script = {
        step: {**action, "outside": outside is not None} if action["do"] == "lose_lease" else action
        for step, action in case.script.items()
    }
    body: dict[str, Any] = {"script": script}
    if case.budgets is not None:
        body["budgets"] = case.budgets
    run = run_start(tenant=tenant, workflow_name=workflow, input=body, actor="test").run
    with tenant_bind(tenant.tenant_id):
        if case.before is not None:
            case.before(run, outside is not None)

        def keeper() -> bool:
            return run_advance(run_id=run.run_id, worker_id="keeper").outcome != "not_acquired"

        advance = outside.advance if outside is not None else keeper
        _drive(advance)
        if case.between is not None:
            run.refresh_from_db()
            case.between(run)
            _drive(advance)
    run.refresh_from_db()
    return _normalized(run.run_id), (run.status, run.suspend_reason or "")


@pytest.fixture
def twin_outside(tenant, live_server):
    external_workflow_register(
        tenant=tenant,
        name="twin.ext",
        version="1",
        steps=list(STEPS),
        actor="test",
        tools=[{"name": TOOL + ".ext", "version": "v1"}],
        approval_guarded_steps=["finish"],
        signals=["go"],
    )
    key = api_key_create(tenant=tenant, name="twin", scope="write").plaintext
    return Outside(live_server.url, key)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_both_drivers_write_the_same_events(case, tenant, twin_outside):
    LOOKUPS.clear()
    LOST.clear()
    keeper_events, keeper_end = _run_case(case, tenant, None)
    LOOKUPS.clear()
    LOST.clear()
    outside_events, outside_end = _run_case(case, tenant, twin_outside)
    assert keeper_events == outside_events
    assert keeper_end == outside_end
    assert len(keeper_events) >= 2  # the case did something
