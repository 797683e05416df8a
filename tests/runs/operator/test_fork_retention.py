"""Retention on the beat: a fork cancelled or expired keeps its events, copied conversation and
summaries for KEEPER_FORK_TTL after it ended, then they go; live forks, recent ones, the parent and
cancelled runs that are no forks stay."""

from __future__ import annotations

import time

import pytest

from runs.conversations.compaction.services import summary_create
from runs.conversations.compaction.tokens import token_counter
from runs.conversations.messages import conversation_append
from runs.engine.forks import forks_expire, run_fork
from runs.engine.runs import run_cancel, run_start
from runs.engine.steps import run_advance
from runs.kernel.models import AgentEvent, AgentRun, Summary
from workers.schedule import beat_schedule
from workers.tasks import purge_abandoned_forks

pytestmark = pytest.mark.django_db


def _chat(tenant, subject: str) -> AgentRun:
    run = run_start(tenant=tenant, workflow_name="conversation", input={}, actor="t", subject=subject).run
    for cmid in ("m-1", "m-2"):
        conversation_append(
            tenant=tenant,
            run_id=run.run_id,
            event_type="user_message",
            client_message_id=cmid,
            body={"content": f"Message {cmid} about order ord-4."},
            actor=f"user:{subject}",
        )
        for _ in range(4):
            if run_advance(run_id=run.run_id).outcome != "committed":
                break
    return AgentRun.objects.get(run_id=run.run_id)


def _gone(run: AgentRun) -> bool:
    return (
        not AgentRun.objects.filter(run_id=run.run_id).exists()
        and not AgentEvent.objects.filter(run_id=run.run_id).exists()
    )


def test_the_beat_purges_forks_cancelled_or_expired_a_fork_ttl_ago(tenant, settings):
    assert any(e["task"] == "workers.tasks.purge_abandoned_forks" for e in beat_schedule().values())
    settings.KEEPER_FORK_TTL = 2
    parent = _chat(tenant, "cust-1")
    cancelled = run_fork(run_id=parent.run_id, at_seq=parent.state_revision, actor="user:eng")
    summary_create(
        run=cancelled,
        events=list(AgentEvent.objects.filter(run=cancelled).order_by("seq")),
        counter=token_counter("gpt-4"),
    )
    assert AgentEvent.objects.filter(run=cancelled, event_type="user_message").count() == 2  # copied
    run_cancel(run_id=cancelled.run_id, actor="user:eng", note="dead end")
    unstarted = run_fork(run_id=parent.run_id, at_seq=parent.state_revision, actor="user:eng", start=False)
    live = run_fork(run_id=parent.run_id, at_seq=parent.state_revision, actor="user:eng")
    not_a_fork = _chat(tenant, "cust-2")
    run_cancel(run_id=not_a_fork.run_id, actor="t")
    time.sleep(2.2)
    assert forks_expire() == 1  # the unstarted fork's TTL ran out: it ends now
    assert purge_abandoned_forks() == 1
    assert _gone(cancelled) and not Summary.objects.filter(run_id=cancelled.run_id).exists()
    assert AgentRun.objects.get(run_id=unstarted.run_id).status == "cancelled"  # ended 0 s ago: kept
    late = run_fork(run_id=parent.run_id, at_seq=parent.state_revision, actor="user:eng")
    time.sleep(2.2)
    run_cancel(run_id=late.run_id, actor="user:eng")
    assert purge_abandoned_forks() == 1
    assert _gone(unstarted)
    for kept in (parent, live, not_a_fork, late):
        assert AgentRun.objects.filter(run_id=kept.run_id).exists()
    assert AgentEvent.objects.filter(run=parent, event_type="user_message").count() == 2
