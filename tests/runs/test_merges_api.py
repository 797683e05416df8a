"""Merging a branch back through the REST API and the management command (bad input is a 4xx with a
reason), and the seams a merge touches: row-level security on its table, erasure of the conflicts it
holds, and reclaim keeping the blobs an open merge names."""

from __future__ import annotations

import json
import uuid

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from rest_framework.test import APIClient

from core.api_auth import api_key_create
from core.tenancy import tenant_bind
from runs.engine.runs import run_resume, run_start
from runs.engine.workspace_models import WorkspaceMerge
from runs.kernel import apply
from runs.kernel import moves as m
from tests.artifacts import blob_stored
from tests.runs.test_merges import PLAN, _drive, _files, _tree

pytestmark = pytest.mark.django_db(transaction=True)


def _client(tenant) -> APIClient:
    client = APIClient()
    client.credentials(
        HTTP_AUTHORIZATION=f"Bearer {api_key_create(tenant=tenant, name='ci', scope='write').plaintext}"
    )
    return client


def _conflicting(tenant, **extra):
    main = {"files": {"plan.md": PLAN.replace("step two", "main")}}
    branch = {"files": {"plan.md": PLAN.replace("step two", "branch")}}
    return _tree(tenant, main=main, branch=branch, **extra)


def test_the_api_merges_lists_conflicts_and_resolves_them(tenant):
    parent, child = _conflicting(tenant)
    api = _client(tenant)
    made = api.post(f"/api/v1/runs/{child.run_id}/merge", {}, format="json")
    assert made.status_code == 201, made.content
    body = made.json()
    assert body["status"] == "conflicts" and body["target_run_id"] == str(parent.run_id)
    assert body["conflicts"] == [
        {
            "id": "plan.md#0",
            "path": "plan.md",
            "kind": "text",
            "base": "step two\n",
            "ours": "main\n",
            "theirs": "branch\n",
        }
    ]
    assert "state" not in body["state"]  # the merged state's values are not shown, only what was taken
    url = f"/api/v1/runs/{parent.run_id}/merges/{body['merge_id']}"
    assert api.get(url).json()["status"] == "conflicts"
    assert api.get(f"/api/v1/runs/{child.run_id}/merges/{body['merge_id']}").status_code == 200
    bad = api.post(url + "/resolve", {"picks": [{"id": "plan.md#0", "take": "mine"}]}, format="json")
    assert bad.status_code == 400 and "take" in json.dumps(bad.json())
    unknown = api.post(url + "/resolve", {"picks": [{"id": "nope#0", "take": "ours"}]}, format="json")
    assert (unknown.status_code, unknown.json()["error"]["code"]) == (422, "merge_unknown_conflict")
    twice = api.post(
        url + "/resolve",
        {"picks": [{"id": "plan.md#0", "take": "ours"}, {"id": "plan.md#0", "take": "theirs"}]},
        format="json",
    )
    assert twice.status_code == 400
    done = api.post(
        url + "/resolve", {"picks": [{"id": "plan.md#0", "take": "edited", "text": "both\n"}]}, format="json"
    )
    assert done.status_code == 200 and done.json()["status"] == "applied", done.content
    assert _files(tenant, parent.run_id)["plan.md"] == b"# plan\nstep one\nboth\nstep three\n"
    again = api.post(url + "/resolve", {"picks": [{"id": "plan.md#0", "take": "ours"}]}, format="json")
    assert (again.status_code, again.json()["error"]["code"]) == (409, "merge_not_open")


def test_bad_merge_requests_get_a_reason_not_a_500(tenant, other_tenant):
    parent, child = _conflicting(tenant)
    api = _client(tenant)
    loner = run_start(tenant=tenant, workflow_name="test.merge", input={"topic": "x"}, actor="t").run
    cases = [
        (f"/api/v1/runs/{child.run_id}/merge", {"into": "not-a-uuid"}, 400, None),
        (f"/api/v1/runs/{child.run_id}/merge", {"intoo": str(parent.run_id)}, 400, None),
        (f"/api/v1/runs/{child.run_id}/merge", {"into": str(uuid.uuid4())}, 404, "run_not_found"),
        (f"/api/v1/runs/{loner.run_id}/merge", {}, 422, "merge_no_parent"),
        (f"/api/v1/runs/{child.run_id}/merge", {"into": str(loner.run_id)}, 422, "merge_not_same_tree"),
        (f"/api/v1/runs/{child.run_id}/merge", {"into": str(child.run_id)}, 422, "merge_into_itself"),
        (f"/api/v1/runs/{child.run_id}/merges/{uuid.uuid4()}", None, 404, "merge_not_found"),
    ]
    for url, body, status, code in cases:
        answer = api.post(url, body, format="json") if body is not None else api.get(url)
        assert answer.status_code == status, (url, body, answer.content)
        if code:
            assert answer.json()["error"]["code"] == code, answer.json()
    with tenant_bind(other_tenant.tenant_id):
        stranger = _client(other_tenant)
    assert stranger.post(f"/api/v1/runs/{child.run_id}/merge", {}, format="json").status_code == 404
    assert not WorkspaceMerge.objects.exists()
    # A run a worker holds may keep files it has not saved: refused, 409.
    run_resume(run_id=parent.run_id, actor="t")
    assert (
        apply(m.LeaseTaken(parent.run_id, parent.tenant_id, "a-worker", 600.0)) is not None
    )  # a worker verifying it
    busy = api.post(f"/api/v1/runs/{child.run_id}/merge", {}, format="json")
    assert (busy.status_code, busy.json()["error"]["code"]) == (409, "merge_run_busy")


def test_the_state_refusal_is_a_409_naming_the_keys(tenant):
    parent, child = _tree(tenant, main={"choice": "main"}, branch={"choice": "branch"})
    refused = _client(tenant).post(f"/api/v1/runs/{child.run_id}/merge", {}, format="json")
    assert refused.status_code == 409
    assert refused.json()["error"]["code"] == "state_merge_refused" and refused.json()["error"][
        "details"
    ] == {"keys": ["choice"]}


def test_the_command_merges_and_names_a_refusals_code(tenant, capsys):
    parent, child = _tree(tenant, main={}, branch={"files": {"new.md": "new\n"}})
    call_command("merge_run", str(child.run_id), "--json")
    report = json.loads(capsys.readouterr().out)
    assert report["status"] == "applied" and report["taken"] == {"new.md": "theirs"}
    assert report["target_run_id"] == str(parent.run_id)
    with pytest.raises(CommandError, match="merge_into_itself"):
        call_command("merge_run", str(child.run_id), "--into", str(child.run_id))


def test_merges_are_isolated_by_row_level_security(tenant, other_tenant):
    _, child = _conflicting(tenant)
    _merge_id(child)
    with connection.cursor() as cursor:
        cursor.execute("SELECT relforcerowsecurity FROM pg_class WHERE relname = 'workspace_merges'")
        assert cursor.fetchone()[0] is True
    with tenant_bind(other_tenant.tenant_id), connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM workspace_merges")
        assert cursor.fetchone()[0] == 0
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM workspace_merges")
        assert cursor.fetchone()[0] == 1


def test_an_open_merges_blobs_outlive_reclaim_and_erasure_deletes_its_conflicts(tenant, settings):
    from core.artifacts.reclaim import artifacts_reclaim
    from erasure.services import erasure_execute, erasure_request_create

    secret = "cust-4711's card ends 4242\n"
    main = {"files": {"plan.md": "main: " + secret}}
    branch = {"files": {"plan.md": "branch: " + secret}}
    parent, child = _tree(tenant, main=main, branch=branch, subject="cust-4711")
    merge = WorkspaceMerge.objects.get(merge_id=_merge_id(child))
    ours = merge.sides["plan.md"]["ours"]
    # The runs' own snapshots go (a TTL, say): the open merge still names the conflicting versions.
    from runs.engine.workspace_models import WorkspaceSnapshot

    WorkspaceSnapshot.objects.filter(run_id__in=[parent.run_id, child.run_id]).delete()
    settings.KEEPER_ARTIFACT_GRACE = 0.0
    artifacts_reclaim()
    assert blob_stored(tenant.tenant_id, ours)

    request = erasure_request_create(tenant=tenant, subject_id="cust-4711", requested_by="user:compliance")
    done = erasure_execute(tenant_id=tenant.tenant_id, request_id=request.request_id)
    assert done.status == "completed" and done.receipt["clean"] is True, done.receipt["final_scan"]
    places = {p["place"]: p for p in done.receipt["places"]}
    assert (
        places["workspace_merges.conflicts"]["before"] >= 1
        and places["workspace_merges.conflicts"]["after"] == 0
    )
    assert not WorkspaceMerge.objects.exists()
    assert not blob_stored(tenant.tenant_id, ours)


def _merge_id(child) -> uuid.UUID:
    from runs.engine.merges import run_merge

    merge = run_merge(run_id=child.run_id, actor="t")
    assert merge.status == "conflicts"
    return merge.merge_id


def test_a_loner_run_drives_to_its_review(tenant):
    # The fixture's workflow stops at its review without a fork: what a merge's parent looks like.
    run = run_start(tenant=tenant, workflow_name="test.merge", input={"topic": "x"}, actor="t").run
    assert _drive(run.run_id).suspend_reason == "waiting_for_review"
