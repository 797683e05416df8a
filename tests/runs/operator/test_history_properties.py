"""Property: any interleaving of commits, crashes, suspends, resumes and forks keeps every history whole."""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.errors import ApplicationError
from runs.engine.forks import run_fork
from runs.engine.runs import run_cancel, run_resume, run_start, run_suspend
from runs.engine.steps import run_advance
from runs.kernel import apply
from runs.kernel import moves as m
from runs.kernel.models import AgentEvent, AgentRun
from runs.kernel.state import state_encode

pytestmark = pytest.mark.django_db

ACTIONS = st.lists(
    st.tuples(
        st.sampled_from(["advance", "advance", "crash", "suspend", "resume", "fork", "cancel"]),
        st.integers(0, 7),
        st.integers(1, 40),
    ),
    min_size=1,
    max_size=30,
)


def _apply(action: str, run: AgentRun, k: int, runs: list[AgentRun]) -> None:
    try:
        if action == "advance":
            run_advance(run_id=run.run_id, worker_id=f"w{k % 2}")
        elif action == "crash":  # a worker takes the lease and dies holding it
            if (
                apply(
                    m.LeaseTaken(
                        run_id=run.run_id,
                        tenant_id=run.tenant_id,
                        owner="doomed",
                        ttl=0.001,
                    )
                )
                is not None
            ):
                time.sleep(0.002)
        elif action == "suspend":
            run_suspend(run_id=run.run_id, actor="user:ops", reason="manual_review")
        elif action == "resume":
            run_resume(run_id=run.run_id, actor="user:ops")
        elif action == "fork":
            revision = AgentRun.objects.get(pk=run.pk).state_revision
            runs.append(run_fork(run_id=run.run_id, at_seq=(k % revision) + 1, actor="user:eng"))
        elif action == "cancel" and k % 5 == 0:
            run_cancel(run_id=run.run_id, actor="user:ops")
    except ApplicationError:
        pass  # refused moves (resume a running run, fork past the end...) must change nothing


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(actions=ACTIONS)
def test_no_interleaving_breaks_a_history(tenant, actions):
    runs = [run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": 3}, actor="test").run]
    for action, which, k in actions:
        _apply(action, runs[which % len(runs)], k, runs)
    for run in runs:
        run.refresh_from_db()
        events = list(AgentEvent.objects.filter(run=run).order_by("seq"))
        assert [e.seq for e in events] == list(range(1, run.state_revision + 1)), "a seq skipped or repeated"
        assert events[-1].state_digest == state_encode(run.state).digest, "the state is not its last event's"
        for event in events:
            if event.state is not None:
                assert state_encode(event.state).digest == event.state_digest
        assert run.state["budgets"]["steps"]["used"] == sum(
            (e.payload.get("spent") or {}).get("steps", 0) for e in events
        )
