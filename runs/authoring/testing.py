"""Testing a workflow against the real engine: Keeper's answer to a time-skipping test environment.

In pytest (the plugin config.pytest_plugin starts an embedded PostgreSQL and Redis for the session
and gives the fixture `keeper_env`):

    def test_refund_waits_for_a_person(keeper_env):
        payments = keeper_env.fake_tool(PAYMENTS, result={"id": "r-1"})
        run = keeper_env.start("shop.refund", {"order": "o-1"})
        run.assert_waiting("approval_required", at="approve")
        keeper_env.approve(run)
        run.assert_completed()
        assert payments.calls == [...]

Every step runs through the engine's own driver (runs.engine.steps.run_advance: the lease, resume
verification, the kernel's fenced commits), inline in the test's process, one step at a time, until
no run of the test's tenant can move. `advance(...)` moves the clock that both Python and PostgreSQL
read (runs.authoring._clock), so timers, signal timeouts, approval expiry and operations' call
deadlines come due without sleeping. Fake tools stand for the outside world only: registered under a
real tool's name, they answer its calls and its lookups (applied, not applied, not authoritative, no
answer) as the test scripts them.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

from core.models import Tenant
from core.tenancy import tenant_bind, tenant_ensure
from runs.authoring._clock import Clock, clock_install
from runs.authoring._definition import Definition
from runs.authoring._tools import OperationCall, OperationRejected, Tool, _never_raising
from runs.authoring.replay import replay_check, replay_file
from runs.engine.approvals import approval_approve, approval_reject
from runs.engine.registry import ToolContract, ToolLookup, Workflow, registry
from runs.engine.runs import run_resume, run_start
from runs.engine.signals import signal_send
from runs.engine.steps import run_advance
from runs.kernel.models import AgentEvent, AgentRun, Approval, ApprovalStatus, RunStatus, ToolOperation
from runs.operator.history import run_history_document

__all__ = [
    "KeeperEnv",
    "TestRun",
    "FakeTool",
    "APPLIED",
    "NOT_APPLIED",
    "NOT_AUTHORITATIVE",
    "NO_ANSWER",
    "TRUTH",
    "RunDidNotSettle",
    "WorkerDied",
    "keeper_env_open",
    "assert_replays",
    "clock_install",
]

# What a fake tool's lookup answers (FakeTool.lookups_answer): the truth of its own ledger (the
# default), an authoritative "applied" or "not applied", an answer that is not authoritative, or no
# answer at all (the lookup times out: the kit raises TimeoutError at once, nothing sleeps).
TRUTH = "truth"
APPLIED = "applied"
NOT_APPLIED = "not_applied"
NOT_AUTHORITATIVE = "not_authoritative"
NO_ANSWER = "no_answer"

WORKER = "keeper-testkit"
PERSON = "person:tester"


class WorkerDied(BaseException):
    """Raised by a fake tool scripted to let the worker die mid-call: like a killed process, nothing
    in the step catches it, the operation stays `started` and the lease stays until it expires."""


class RunDidNotSettle(AssertionError):
    """The runs kept moving past the kit's step limit (a loop in the workflow?)."""


# --- fake tools ---


@dataclass
class FakeTool:
    """The outside world behind one tool, scripted by the test. Calls apply by default; queue other
    answers with `calls_answer(...)`; lookups tell the truth of `ledger` by default; queue others with
    `lookups_answer(...)`. `calls` and `lookups` record what the workflow asked, in order."""

    name: str
    result: Callable[[Mapping[str, Any], str], Any] | Any = None
    ledger: dict[str, Any] = field(default_factory=dict)
    calls: list[dict[str, Any]] = field(default_factory=list)
    lookups: list[str] = field(default_factory=list)
    _call_script: deque[tuple[str, Any]] = field(default_factory=deque)
    _lookup_script: deque[str] = field(default_factory=deque)
    _contract: Tool | None = None

    def calls_answer(self, *answers: tuple[str, Any] | str) -> FakeTool:
        """Queue how the next calls end: "apply" (the default), ("reject", {"code": ...}) (a definite
        no: the operation fails), "time_out_applied" (applied, but the answer never came back) or
        "time_out_not_applied" (nothing applied, and no answer either)."""
        for answer in answers:
            self._call_script.append(answer if isinstance(answer, tuple) else (answer, None))
        return self

    def lookups_answer(self, *answers: str) -> FakeTool:
        """Queue the next lookups' answers: TRUTH, APPLIED, NOT_APPLIED, NOT_AUTHORITATIVE, NO_ANSWER."""
        for answer in answers:
            if answer not in (TRUTH, APPLIED, NOT_APPLIED, NOT_AUTHORITATIVE, NO_ANSWER):
                raise ValueError(f"a lookup answers one of the kit's answers, not {answer!r}")
            self._lookup_script.append(answer)
        return self

    def answer(self, request: Mapping[str, Any], call: OperationCall) -> Any:
        key = call.idempotency_key
        self.calls.append({"idempotency_key": key, "request": dict(request)})
        how, detail = self._call_script.popleft() if self._call_script else ("apply", None)
        if how == "reject":
            raise OperationRejected(str((detail or {}).get("message", "rejected")), result=detail)
        if how in ("apply", "time_out_applied", "worker_dies_applied"):
            self.ledger.setdefault(key, self._result(request, key))
        call.sent()
        if how.startswith("time_out"):
            raise TimeoutError(f"{self.name}: no answer (scripted)")
        if how.startswith("worker_dies"):
            raise WorkerDied(f"{self.name}: the worker died waiting for the answer (scripted)")
        if how != "apply":
            raise ValueError(f"unknown scripted answer {how!r}")
        return self.ledger[key]

    def lookup(self, key: str) -> ToolLookup:
        self.lookups.append(key)
        how = self._lookup_script.popleft() if self._lookup_script else TRUTH
        if how == NO_ANSWER:
            raise TimeoutError(f"{self.name}: the lookup did not answer (scripted)")
        if how == NOT_AUTHORITATIVE:
            return ToolLookup(authoritative=False, applied=None)
        applied = key in self.ledger if how == TRUTH else how == APPLIED
        if not applied:
            return ToolLookup(authoritative=True, applied=False)
        found = self.ledger.get(key) or self._result({}, key)
        ref = self._contract.external_ref(found) if self._contract is not None else str(found["id"])
        return ToolLookup(authoritative=True, applied=True, external_ref=ref, result=found)

    def _result(self, request: Mapping[str, Any], key: str) -> Any:
        if callable(self.result):
            return self.result(request, key)
        if self.result is not None:
            return self.result
        return {"id": f"{self.name}-{len(self.ledger) + 1}"}


# --- a run under test ---


class TestRun:
    """A run the test started: what it is now (read afresh on every access) and assertions that say
    what went wrong in the run's own words."""

    __test__ = False  # not a test class, for pytest's collector

    def __init__(self, env: KeeperEnv, run_id: UUID):
        self.env, self.run_id = env, run_id

    @property
    def row(self) -> AgentRun:
        return AgentRun.objects.get(run_id=self.run_id, tenant_id=self.env.tenant.tenant_id)

    status = property(lambda self: self.row.status)
    state = property(lambda self: self.row.state)
    result = property(lambda self: self.row.result)
    next_step = property(lambda self: self.row.next_step)
    suspend_reason = property(lambda self: self.row.suspend_reason)
    suspend_detail = property(lambda self: self.row.suspend_detail)

    @property
    def events(self) -> list[AgentEvent]:
        return list(
            AgentEvent.objects.filter(run_id=self.run_id, tenant_id=self.env.tenant.tenant_id).order_by("seq")
        )

    @property
    def event_types(self) -> list[str]:
        return [e.event_type for e in self.events]

    @property
    def steps_run(self) -> list[str]:
        """The steps that committed, in order (a step that ran again after a wait appears again)."""
        moved = ("step_completed", "run_completed", "run_failed", "run_suspended", "step_error")
        return [e.step_id for e in self.events if e.event_type in moved and e.step_id]

    @property
    def operations(self) -> list[ToolOperation]:
        return list(
            ToolOperation.objects.filter(run_id=self.run_id, tenant_id=self.env.tenant.tenant_id).order_by(
                "id"
            )
        )

    def operation(self, operation_id: str) -> ToolOperation:
        return ToolOperation.objects.get(
            run_id=self.run_id, tenant_id=self.env.tenant.tenant_id, operation_id=operation_id
        )

    @property
    def approvals(self) -> list[Approval]:
        return list(
            Approval.objects.filter(run_id=self.run_id, tenant_id=self.env.tenant.tenant_id).order_by(
                "created_at"
            )
        )

    def describe(self) -> str:
        run = self.row
        where = f"at {run.next_step}" if run.next_step else "with no next step"
        why = f" ({run.suspend_reason}: {run.suspend_detail})" if run.suspend_reason else ""
        return (
            f"run {run.run_id} of {run.workflow_name} is {run.status} {where}{why}; events {self.event_types}"
        )

    def assert_completed(self, result: Any = None) -> TestRun:
        run = self.row
        assert run.status == RunStatus.COMPLETED, f"expected completed: {self.describe()}"
        assert result is None or run.result == result, f"result {run.result!r}, expected {result!r}"
        return self

    def assert_failed(self, code: str | None = None) -> TestRun:
        run = self.row
        assert run.status == RunStatus.FAILED, f"expected failed: {self.describe()}"
        assert code is None or (run.result or {}).get("code") == code or run.suspend_reason == code, (
            f"expected failure {code!r}: {self.describe()}; result {run.result!r}"
        )
        return self

    def assert_waiting(self, reason: str, *, at: str | None = None) -> TestRun:
        """Suspended for `reason` (approval_required, timer, signal, reconciliation_required, ...),
        and (`at`) to continue at that step."""
        run = self.row
        assert (run.status, run.suspend_reason) == (RunStatus.SUSPENDED, reason), (
            f"expected suspended for {reason!r}: {self.describe()}"
        )
        assert at is None or run.next_step == at, f"expected to continue at {at!r}: {self.describe()}"
        return self

    def assert_events(self, *types: str) -> TestRun:
        """These event types happened in this order (others may come between)."""
        seen = iter(self.event_types)
        missing = [t for t in types if not any(t == s for s in seen)]
        assert not missing, (
            f"events {list(types)} not in order; first missing {missing[0]!r}: {self.describe()}"
        )
        return self

    def __repr__(self) -> str:
        return f"<TestRun {self.run_id}>"


# --- the environment ---


class KeeperEnv:
    """A test's Keeper: its tenant, its clock, its fake tools, and the runs it drives."""

    def __init__(self, *, tenant: Tenant, clock: Clock, max_steps: int = 500):
        self.tenant, self.clock, self.max_steps = tenant, clock, max_steps
        self._replaced: dict[str, ToolContract | None] = {}

    # starting and driving

    def start(
        self,
        workflow: str | Workflow | Definition[Any],
        input: Mapping[str, Any],
        *,
        version: str | None = None,
        idempotency_key: str | None = None,
        subject: str = "",
        drive: bool = True,
    ) -> TestRun:
        """Start a run (the engine's own run_start) and drive it until nothing can move."""
        name = workflow if isinstance(workflow, str) else workflow.name
        if isinstance(workflow, Workflow | Definition) and version is None:
            version = workflow.version
        started = run_start(
            tenant=self.tenant,
            workflow_name=name,
            workflow_version=version,
            input=dict(input),
            actor=PERSON,
            idempotency_key=idempotency_key,
            subject=subject,
        )
        if drive:
            self.run_until_idle()
        return TestRun(self, started.run.run_id)

    def run_until_idle(self) -> int:
        """Run steps of this tenant's runs (children too) until none can move now; the steps run."""
        steps = 0
        while True:
            moved = False
            for run_id in self._movable():
                try:
                    outcome = run_advance(run_id=run_id, worker_id=WORKER).outcome
                except WorkerDied:  # the lease stays held until it expires, as a killed worker's would
                    continue
                if outcome in ("committed", "fenced"):
                    moved, steps = True, steps + 1
                if steps > self.max_steps:
                    raise RunDidNotSettle(f"runs still moving after {self.max_steps} steps")
            if not moved:
                return steps

    def _movable(self) -> list[UUID]:
        runs = AgentRun.objects.filter(tenant_id=self.tenant.tenant_id, imported=False)
        waiting = runs.filter(status=RunStatus.SUSPENDED, resume_requested_at__isnull=False)
        return list(
            (runs.filter(status=RunStatus.RUNNING) | waiting)
            .order_by("created_at")
            .values_list("run_id", flat=True)
        )

    # time

    def now(self) -> datetime:
        return self.clock.now()

    def advance(
        self, seconds: float = 0, *, minutes: float = 0, hours: float = 0, days: float = 0, drive: bool = True
    ) -> None:
        """Move the clock forward (timers, deadlines, leases and expiries come due) and drive the runs."""
        delta = timedelta(seconds=seconds, minutes=minutes, hours=hours, days=days)
        self.clock.advance(delta.total_seconds())
        if drive:
            self.run_until_idle()

    # people and outside events

    def approval(self, run: TestRun) -> Approval:
        """The run's pending approval (what a person sees in the support inbox)."""
        pending = [a for a in run.approvals if a.status == ApprovalStatus.PENDING]
        assert pending, f"no pending approval: {run.describe()}"
        return pending[-1]

    def approve(self, run: TestRun, *, by: str = PERSON, note: str = "", drive: bool = True) -> Approval:
        approval = approval_approve(approval_id=self.approval(run).approval_id, actor=by, note=note)
        if drive:
            self.run_until_idle()
        return approval

    def reject(self, run: TestRun, *, note: str, by: str = PERSON, drive: bool = True) -> Approval:
        approval = approval_reject(approval_id=self.approval(run).approval_id, actor=by, note=note)
        if drive:
            self.run_until_idle()
        return approval

    def signal(
        self, run: TestRun, name: str, payload: Any = None, *, key: str | None = None, drive: bool = True
    ) -> AgentEvent:
        """Send signal `name` (as POST /api/v1/runs/{id}/signals/{name} does) and drive the runs."""
        sent = signal_send(
            run_id=run.run_id, name=name, payload=payload, idempotency_key=key or uuid4().hex, actor=PERSON
        )
        if drive:
            self.run_until_idle()
        return sent.event

    def message(self, run: TestRun, text: str, *, drive: bool = True) -> AgentEvent:
        """A user message to a conversation run (as POST /api/v1/runs/{id}/messages/ does)."""
        from runs.conversations.messages import conversation_append

        appended = conversation_append(
            tenant=self.tenant,
            run_id=run.run_id,
            event_type="user_message",
            client_message_id=uuid4().hex,
            body={"content": text},
            actor=f"user:{run.row.subject or 'customer'}",
        )
        if drive:
            self.run_until_idle()
        return appended.event

    def resume(self, run: TestRun, *, by: str = PERSON, note: str = "", drive: bool = True) -> None:
        """A person resumes a suspended run (resume verification runs again first)."""
        run_resume(run_id=run.run_id, actor=by, note=note)
        if drive:
            self.run_until_idle()

    def history(self, run: TestRun) -> dict[str, Any]:
        """The run's history as `manage.py export_history` writes it (what the replay check reads)."""
        return run_history_document(run_id=run.run_id)

    # the outside world

    def fake_tool(
        self, tool: Tool | str, *, result: Callable[[Mapping[str, Any], str], Any] | Any = None
    ) -> FakeTool:
        """Stand a fake in for `tool` (a declared tool or its name) until the test ends: the workflow's
        operations on it and resume verification's lookups reach the fake, never the real system."""
        declared = registry.tool(tool) if isinstance(tool, str) else tool
        if not isinstance(declared, Tool):
            raise LookupError(f"no tool {tool!r} is declared in this process (runs.authoring.tool)")
        fake = FakeTool(declared.name, result=result, _contract=declared)
        stand_in = Tool(
            name=declared.name,
            version=declared.version,
            lookup=_never_raising(fake.lookup),  # as tool() declares it: an unreachable lookup proves nothing
            external_ref=declared.external_ref,
            crash_label=declared.crash_label,
            call_timeout_s=declared.call_timeout_s,
            answers=fake.answer,
        )
        self._replaced.setdefault(declared.name, registry.tool(declared.name))
        registry.register_tool(stand_in)
        return fake

    def close(self) -> None:
        for name, original in self._replaced.items():
            if original is not None:
                registry.register_tool(original)
            else:
                registry.unregister_tool(name)
        self._replaced.clear()


def assert_replays(*histories: Mapping[str, Any] | str | Path) -> None:
    """Each history (a document, or the path of a file export_history wrote) replays on the code in
    this process (runs.authoring.replay); else the first divergence, with its seq, fails the test."""
    reports = [replay_check(h) if isinstance(h, Mapping) else replay_file(h) for h in histories]
    diverged = [r.summary() for r in reports if not r.ok]
    assert not diverged, "\n".join(diverged)


@contextmanager
def keeper_env_open(*, tenant_slug: str = "testkit", max_steps: int = 500) -> Iterator[KeeperEnv]:
    """A KeeperEnv on the test database (clock_install must have run on it): its tenant bound to the
    block's statements, the clock at the real time, the real tools back at the end."""
    clock = Clock()
    clock.start()
    env: KeeperEnv | None = None
    try:
        tenant = tenant_ensure(slug=tenant_slug, name="Test kit")
        with tenant_bind(tenant.tenant_id):
            env = KeeperEnv(tenant=tenant, clock=clock, max_steps=max_steps)
            yield env
    finally:
        if env is not None:
            env.close()
        clock.stop()
