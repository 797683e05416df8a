"""Workflows used by the tests. Registered in every process through KEEPER_WORKFLOW_MODULES."""

from __future__ import annotations

import time

from runs.engine.registry import Complete, Next, State, Step, StepContext, StepResult, Workflow, registry


def _begin(ctx: StepContext, state: State) -> StepResult:
    return Next({**state, "began": True}, "slow")


def _slow(ctx: StepContext, state: State) -> StepResult:
    # Sleeps on the first attempt only, so a worker killed here lets the next attempt pass.
    if ctx.attempt == 1:
        time.sleep(state.get("sleep_s", 30))
    return Next({**state, "slow_attempts": ctx.attempt, "slow_done_by_revision": ctx.revision}, "done")


def _done(ctx: StepContext, state: State) -> StepResult:
    return Complete(state, {"ok": True})


slow = registry.register(
    Workflow(
        name="test.slow", version="1", steps=(Step("begin", _begin), Step("slow", _slow), Step("done", _done))
    )
)


def _heartbeat_sleep(ctx: StepContext, state: State) -> StepResult:
    # Longer than the lease TTL: only the heartbeat keeps the lease.
    deadline = time.monotonic() + state["sleep_s"]
    while time.monotonic() < deadline:
        time.sleep(0.05)
    return Complete({**state, "lease_lost": ctx.lease_lost}, {"attempt": ctx.attempt})


long_step = registry.register(
    Workflow(name="test.long_step", version="1", steps=(Step("sleep", _heartbeat_sleep),))
)


def _flaky(ctx: StepContext, state: State) -> StepResult:
    if ctx.attempt <= state["fail_times"]:
        raise RuntimeError(f"flaky failure on attempt {ctx.attempt}")
    return Complete(state, {"attempt": ctx.attempt})


flaky = registry.register(Workflow(name="test.flaky", version="1", steps=(Step("call", _flaky),)))


class _Client:
    """Stands for an SDK client: it must never reach the state."""


def _bad_state(ctx: StepContext, state: State) -> StepResult:
    return Next({**state, "client": _Client()}, "never")


def _never(ctx: StepContext, state: State) -> StepResult:
    raise AssertionError("a step after an invalid state must not run")


bad_state = registry.register(
    Workflow(name="test.bad_state", version="1", steps=(Step("make", _bad_state), Step("never", _never)))
)


def _jump(ctx: StepContext, state: State) -> StepResult:
    return Next(state, "nowhere")


bad_jump = registry.register(Workflow(name="test.bad_jump", version="1", steps=(Step("jump", _jump),)))


def _interrupted(ctx: StepContext, state: State) -> StepResult:
    # The first attempt is overtaken by a message stored while it runs (a new revision, same lease).
    from runs.kernel import apply
    from runs.kernel import moves as m
    from runs.kernel.models import AgentEvent

    if not AgentEvent.objects.filter(run_id=ctx.run_id, event_type="user_message").exists():
        apply(
            m.MessageAppended(
                run_id=ctx.run_id,
                tenant_id=ctx.tenant_id,
                event_type="user_message",
                payload={"content": "arrived mid-step"},
                actor="user:x",
                client_message_id="mid-step",
            )
        )
    return Complete(state, {"attempt": ctx.attempt})


interrupted = registry.register(
    Workflow(name="test.interrupted", version="1", steps=(Step("work", _interrupted),))
)
