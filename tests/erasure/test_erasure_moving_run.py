"""Erasure of a subject whose run is stepping right now, in a real worker process: a run that commits
a step every millisecond is always ahead of a plain read, and the request must not fail with "kept
moving" while the run goes on to completion carrying the person's data."""

from __future__ import annotations

import time

import pytest

from erasure.services import erasure_execute, erasure_request_create
from runs.engine.runs import run_start
from runs.kernel.models import AgentEvent, AgentRun
from tests.processes import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SUBJECT = "cust-moving-4411"
EMAIL = "zofia.kowalska@example.org"


def test_a_run_stepping_in_a_worker_is_stopped_and_erased_and_the_request_completes(tenant, processes):
    runs = [
        run_start(
            tenant=tenant,
            workflow_name="demo.countdown",
            input={"n": 10_000, "note": f"write to {EMAIL} after the refund"},
            actor="t",
            subject=SUBJECT,
        ).run
        for _ in range(3)
    ]
    processes.worker(concurrency=4, pool="threads")
    wait_until(
        lambda: all(AgentEvent.objects.filter(run=r).count() > 1500 for r in runs),
        timeout=60,
        message="the runs to be stepping",
    )
    request = erasure_request_create(tenant=tenant, subject_id=SUBJECT, requested_by="user:compliance")
    done = erasure_execute(tenant_id=tenant.tenant_id, request_id=request.request_id)
    assert done.status == "completed", done.error
    assert done.receipt["clean"] is True, done.receipt["final_scan"]
    for run in runs:
        run.refresh_from_db()
        assert (run.status, run.suspend_reason) == ("suspended", "subject_erased")
        revision = run.state_revision
        assert EMAIL not in str(run.state) and SUBJECT not in str(run.state)
        # The worker's next commit was refused: the run stays where the erasure left it.
        time.sleep(0.5)
        assert AgentRun.objects.get(pk=run.pk).state_revision == revision
        assert not AgentEvent.objects.filter(run=run, seq__gt=revision).exists()
        assert not any(
            EMAIL in str(p) or SUBJECT in str(p)
            for p in AgentEvent.objects.filter(run=run).values_list("payload", "state")
        )
