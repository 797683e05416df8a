"""Resume verification and the retrieval sources behind a run's snapshots: a document deleted or
replaced by a newer source_version since the run's search stops the run (`source_changed`), or, for a
workflow with on_source_change="refetch", detaches the stale snapshots so the run searches again."""

from __future__ import annotations

import pytest

from retrieval.models import RetrievalSnapshot
from retrieval.search import retrieval_search
from retrieval.services import document_delete, document_index, principal_set
from retrieval.snapshots import snapshot_find
from runs.authoring._definition import workflow
from runs.engine.registry import Step, StepContext, Suspend, Workflow, registry
from runs.engine.runs import run_resume, run_start
from runs.engine.steps import run_advance
from runs.kernel.errors import WorkflowDefinitionError
from runs.kernel.models import AgentEvent, AgentRun
from tests.processes import flush_redis

pytestmark = pytest.mark.django_db
QUERY = "how are refunds paid"


def _wait(ctx: StepContext, state: dict) -> Suspend:
    return Suspend(state, "waiting_for_person")


registry.register(Workflow(name="test.sourced", version="1", steps=(Step("wait", _wait),)))
registry.register(
    Workflow(name="test.refetching", version="1", steps=(Step("wait", _wait),), on_source_change="refetch")
)


@pytest.fixture(autouse=True)
def _fresh():
    flush_redis()
    yield
    flush_redis()


def _index(tenant, version: str, text: bytes = b"Refunds are paid within 14 days.") -> None:
    document_index(
        tenant=tenant,
        document_id="policy-42",
        source_uri="s3://kb/policy-42.txt",
        source_version=version,
        data=text,
        media_type="text/plain",
        acl=["group:support"],
        actor="user:test",
        wait=True,
    )


def _searched_run(tenant, workflow_name="test.sourced") -> AgentRun:
    _index(tenant, "etag:1")
    principal_set(tenant=tenant, principal="user:ann", groups=["group:support"], actor="user:test")
    run = run_start(tenant=tenant, workflow_name=workflow_name, input={}, actor="t").run
    result = retrieval_search(tenant=tenant, query=QUERY, principal="user:ann", run_id=run.run_id)
    assert [h.document_id for h in result.hits] == ["policy-42"]
    run_advance(run_id=run.run_id)
    return AgentRun.objects.get(run_id=run.run_id)


def _resume(run) -> AgentRun:
    run_resume(run_id=run.run_id, actor="user:ops")
    run_advance(run_id=run.run_id)
    return AgentRun.objects.get(run_id=run.run_id)


def test_unchanged_sources_let_the_run_resume(tenant):
    run = _resume(_searched_run(tenant))
    verified = AgentEvent.objects.get(run=run, event_type="resume_verified")
    assert verified.payload["checks"][2]["name"] == "artifacts_and_contracts"
    assert run.suspend_reason == "waiting_for_person"  # resumed, ran its step, waits again


def test_a_newer_source_version_stops_the_run_with_source_changed(tenant):
    run = _searched_run(tenant)
    _index(tenant, "etag:2", b"Refunds are paid within 30 days.")
    run = _resume(run)
    assert run.status == "suspended" and run.suspend_reason == "source_changed"
    assert "policy-42 (version etag:1" in run.suspend_detail and "now version etag:2" in run.suspend_detail
    refused = AgentEvent.objects.get(run=run, event_type="resume_refused")
    assert refused.payload["checks"][-1]["code"] == "source_changed"


def test_a_deleted_source_stops_the_run(tenant):
    run = _searched_run(tenant)
    document_delete(tenant=tenant, document_id="policy-42", actor="user:test")
    run = _resume(run)
    assert run.suspend_reason == "source_changed" and "policy-42" in run.suspend_detail
    assert "is deleted" in run.suspend_detail


def test_a_refetching_workflow_detaches_the_stale_snapshots_and_resumes(tenant):
    run = _searched_run(tenant, workflow_name="test.refetching")
    [snapshot] = RetrievalSnapshot.objects.filter(run_id=run.run_id)
    _index(tenant, "etag:2", b"Refunds are paid within 30 days.")
    run = _resume(run)
    assert run.suspend_reason == "waiting_for_person"  # it went on
    verified = AgentEvent.objects.get(run=run, event_type="resume_verified")
    assert "1 snapshot(s) detached to re-fetch" in verified.payload["checks"][2]["detail"]
    assert snapshot_find(tenant=tenant, run_id=run.run_id, query=QUERY, principal="user:ann") is None
    assert RetrievalSnapshot.objects.get(snapshot_id=snapshot.snapshot_id).run_id is None  # kept
    again = retrieval_search(tenant=tenant, query=QUERY, principal="user:ann", run_id=run.run_id)
    assert [h.source_version for h in again.hits] == ["etag:2"]


def test_the_policy_is_a_workflow_keyword_with_stop_as_default():
    assert workflow("test.policy-default", version="1").on_source_change == "stop"
    with pytest.raises(WorkflowDefinitionError, match="on_source_change"):
        Workflow(name="test.bad", version="1", steps=(Step("wait", _wait),), on_source_change="ignore")
