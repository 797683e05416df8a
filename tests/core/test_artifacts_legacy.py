"""Blobs stored before the records (references holding file:// paths) keep working: adopted by the
digests a tenant's rows name, found under the old root by digest alone, kept only if they match."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

import tests.runs.workspace_flows  # noqa: F401 - registers test.workspace in this process
from core.artifacts import artifact_get, artifacts_check, artifacts_stored
from core.artifacts.legacy import artifacts_adopt_legacy
from runs.engine.runs import run_start
from runs.engine.steps import run_advance
from runs.engine.workspace import Workspace
from runs.engine.workspace_models import WorkspaceSnapshot
from runs.kernel.models import AgentRun
from tests.s3 import S3, s3, s3_server  # noqa: F401 - the fixtures

pytestmark = pytest.mark.django_db(transaction=True)


def _legacy(root: Path, data: bytes) -> dict:
    """A blob as the old store wrote it, and the reference rows kept: digest, absolute URI, size."""
    hexdigest = hashlib.sha256(data).hexdigest()
    path = root / hexdigest[:2] / hexdigest
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return {"digest": f"sha256:{hexdigest}", "uri": f"file://{path}", "size": len(data)}


def _finished_run(tenant, **state) -> AgentRun:
    run = run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": 1, **state}, actor="t").run
    for _ in range(5):
        if run_advance(run_id=run.run_id).status != "running":
            break
    return AgentRun.objects.get(run_id=run.run_id)


def test_old_references_are_adopted_in_place_and_read_by_digest(tenant, settings):
    root = Path(settings.KEEPER_ARTIFACT_ROOT)
    plan = _legacy(root, b"# an old plan\n")
    report = _legacy(root, b"an old report kept in a state")
    changed = _legacy(root, b"bytes that were changed on disk")
    (root / changed["digest"][7:9] / changed["digest"][7:]).write_bytes(b"something else entirely!!!!!!!")
    passwd = Path("/etc/passwd").read_bytes()
    outside = {"digest": "sha256:" + hashlib.sha256(passwd).hexdigest(), "uri": "file:///etc/passwd"}
    run = _finished_run(tenant, report=report, probe=outside, changed=changed)
    WorkspaceSnapshot.objects.create(
        tenant=tenant, run=run, seq=99, reason="finished", manifest={"plan.md": plan}
    )

    counts = artifacts_adopt_legacy(root=root)

    # The plan and the report are recorded where they lie; /etc/passwd was looked for by its digest
    # under the root only (not there), and the changed file does not match its digest.
    assert counts == {"adopted": 2, "copied": 0, "missing": 1, "mismatched": 1, "refused": 0}
    assert set(artifacts_stored(tenant_id=tenant.tenant_id, digests=[plan["digest"], outside["digest"]])) == {
        plan["digest"]
    }
    workspace = Workspace(run_id=run.run_id, tenant_id=tenant.tenant_id, base={"plan.md": plan})
    assert workspace.read_text("plan.md") == "# an old plan\n"
    assert artifact_get(tenant_id=tenant.tenant_id, ref=report) == b"an old report kept in a state"
    assert artifacts_check(tenant_id=tenant.tenant_id, value=run.state).verified == 1
    assert artifacts_adopt_legacy(root=root)["adopted"] == 0  # run again: nothing more to do


def test_another_tenant_adopts_only_what_its_own_rows_name(tenant, other_tenant, settings):
    root = Path(settings.KEEPER_ARTIFACT_ROOT)
    mine = _legacy(root, b"acme's old tool output")
    _finished_run(tenant, report=mine)
    artifacts_adopt_legacy(root=root)
    assert artifacts_stored(tenant_id=other_tenant.tenant_id, digests=[mine["digest"]]) == {}


def test_old_blobs_are_copied_into_the_bucket_under_the_tenants_prefix(tenant, s3: S3, tmp_path):  # noqa: F811
    old_root = tmp_path / "old-artifacts"
    report = _legacy(old_root, b"moved to S3")
    _finished_run(tenant, report=report)
    assert artifacts_adopt_legacy(root=old_root)["copied"] == 1
    hexdigest = report["digest"][7:]
    assert s3.object_keys() == [f"{tenant.tenant_id}/{hexdigest[:2]}/{hexdigest}"]
    assert artifact_get(tenant_id=tenant.tenant_id, ref=report) == b"moved to S3"
