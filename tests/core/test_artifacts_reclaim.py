"""Reclaiming stored blobs: one is deleted only when no row of any kind refers to it and no put
touched it for the grace period, in the local folder and in an S3 bucket alike."""

from __future__ import annotations

import time

import pytest

import tests.runs.workspace_flows  # noqa: F401 - registers test.workspace in this process
from core.artifacts import artifact_get, artifact_put
from core.artifacts.reclaim import artifacts_reclaim
from core.tenancy import tenant_scope
from runs.conversations.messages import conversation_append
from runs.engine.runs import run_resume, run_start
from runs.engine.steps import run_advance
from runs.engine.workspace import workspace_reclaim
from runs.engine.workspace_models import WorkspaceSnapshot
from runs.kernel.models import AgentEvent, AgentRun
from tests.artifacts import blob_stored
from tests.s3 import s3, s3_server  # noqa: F401 - the fixtures behind `backend`

pytestmark = pytest.mark.django_db(transaction=True)

LONG = "the same 4 KiB of output, stored once per tenant. " * 100  # over the tool-result preview


@pytest.fixture(params=["local", "s3"])
def backend(request, settings) -> str:
    """Each test once on the local folder and once on a bucket of a real S3-protocol server."""
    if request.param == "s3":
        request.getfixturevalue("s3")
    return str(request.param)


def _drive(run_id) -> None:
    for _ in range(20):
        if run_advance(run_id=run_id).status != "running":
            return


def _finished_workspace_run(tenant) -> AgentRun:
    run = run_start(tenant=tenant, workflow_name="test.workspace", input={"topic": "reclaim"}, actor="t").run
    _drive(run.run_id)
    run_resume(run_id=run.run_id, actor="t")
    _drive(run.run_id)
    assert AgentRun.objects.get(run_id=run.run_id).status == "completed"
    return run


def _tool_result(tenant, text: str, *, subject: str = "") -> dict:
    run = run_start(tenant=tenant, workflow_name="conversation", input={}, actor="t", subject=subject).run
    conversation_append(
        tenant=tenant,
        run_id=run.run_id,
        event_type="tool_result",
        client_message_id="t1",
        body={"call_id": "c1", "tool": "crm", "content": text},
        actor="t",
    )
    with tenant_scope(tenant.tenant_id):
        return AgentEvent.objects.get(run=run, event_type="tool_result").payload["content_ref"]


def test_a_tool_result_sharing_bytes_with_a_workspace_file_survives_the_workspace_reclaim(
    tenant, settings, backend
):
    done = _finished_workspace_run(tenant)
    ref = artifact_put(tenant_id=tenant.tenant_id, data=LONG.encode(), kind="workspace")
    WorkspaceSnapshot.objects.create(
        tenant=tenant, run=done, seq=1000, reason="finished", manifest={"out.txt": ref}
    )
    result = _tool_result(tenant, LONG)
    assert result["digest"] == ref["digest"]  # one blob for both
    settings.KEEPER_WORKSPACE_TTL, settings.KEEPER_ARTIFACT_GRACE = 0.0, 0.0
    time.sleep(0.05)
    assert workspace_reclaim()["snapshots"] >= 1
    swept = artifacts_reclaim()
    assert swept["deleted"] >= 1 and swept["in_use"] >= 1  # the finished run's own files went
    assert artifact_get(tenant_id=tenant.tenant_id, ref=result).decode() == LONG  # the tool result's stayed


@pytest.mark.parametrize("where", ["manifest", "changes"])
def test_a_blob_a_workspace_snapshot_names_is_kept_until_the_snapshot_goes(tenant, settings, backend, where):
    done = _finished_workspace_run(tenant)
    ref = artifact_put(tenant_id=tenant.tenant_id, data=f"in the {where}".encode(), kind="workspace")
    row = (
        {"manifest": {"a.md": ref}}
        if where == "manifest"
        else {"changes": [{"seq": 999, "files": {"a.md": ref, "gone.md": None}}]}
    )
    WorkspaceSnapshot.objects.create(tenant=tenant, run=done, seq=1000, reason="interval", **row)
    settings.KEEPER_ARTIFACT_GRACE = 0.0
    artifacts_reclaim()
    assert blob_stored(tenant.tenant_id, ref)
    WorkspaceSnapshot.objects.filter(run=done, seq=1000).delete()
    artifacts_reclaim()
    assert not blob_stored(tenant.tenant_id, ref)


def test_a_blob_a_tool_result_names_is_kept(tenant, settings, backend):
    ref = _tool_result(tenant, LONG + "tool")
    settings.KEEPER_ARTIFACT_GRACE = 0.0
    assert artifacts_reclaim()["in_use"] == 1
    assert blob_stored(tenant.tenant_id, ref)


def test_a_blob_a_runs_state_names_is_kept_and_one_nothing_names_goes(tenant, settings, backend):
    named = artifact_put(tenant_id=tenant.tenant_id, data=b"attached to the run", kind="run_state")
    loose = artifact_put(tenant_id=tenant.tenant_id, data=b"stored, never referred to", kind="run_state")
    run = run_start(
        tenant=tenant, workflow_name="demo.countdown", input={"n": 2, "report": named}, actor="t"
    ).run
    _drive(run.run_id)  # completed: the state (and its copies on events) still names it
    settings.KEEPER_ARTIFACT_GRACE = 0.0
    assert artifacts_reclaim() == {"checked": 2, "deleted": 1, "in_use": 1}
    assert blob_stored(tenant.tenant_id, named) and not blob_stored(tenant.tenant_id, loose)


def test_a_blob_being_written_is_not_deleted_before_its_row_exists(tenant, settings, backend):
    # Stored, its referring row not written yet: the grace period keeps it.
    settings.KEEPER_ARTIFACT_GRACE = 3.0
    ref = artifact_put(tenant_id=tenant.tenant_id, data=b"a snapshot in the making", kind="workspace")
    assert artifacts_reclaim()["checked"] == 0 and blob_stored(tenant.tenant_id, ref)
    time.sleep(3.2)
    # The same bytes stored again (another writer dedupes onto them): touched, kept another period.
    artifact_put(tenant_id=tenant.tenant_id, data=b"a snapshot in the making", kind="workspace")
    assert artifacts_reclaim()["checked"] == 0 and blob_stored(tenant.tenant_id, ref)
    time.sleep(3.2)
    assert artifacts_reclaim()["deleted"] == 1  # nobody wrote the row: gone after the grace period
    assert not blob_stored(tenant.tenant_id, ref)
    # A put after the sweep stores it again.
    artifact_put(tenant_id=tenant.tenant_id, data=b"a snapshot in the making", kind="workspace")
    assert artifact_get(tenant_id=tenant.tenant_id, ref=ref) == b"a snapshot in the making"


def test_another_tenants_reference_does_not_keep_a_tenants_blob(tenant, other_tenant, settings, backend):
    ref = artifact_put(tenant_id=tenant.tenant_id, data=LONG.encode(), kind="tool_result")
    theirs = _tool_result(other_tenant, LONG)  # globex refers to the same bytes, in its own records
    settings.KEEPER_ARTIFACT_GRACE = 0.0
    artifacts_reclaim()
    assert not blob_stored(tenant.tenant_id, ref) and blob_stored(other_tenant.tenant_id, theirs)
    assert artifact_get(tenant_id=other_tenant.tenant_id, ref=theirs).decode() == LONG
