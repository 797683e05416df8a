"""With an API key the tenant comes from the key: every URL of the API, given another tenant's object
or naming another tenant, answers 404 (never 403: no existence leak) and changes nothing. Each test
runs straight on PostgreSQL and through PgBouncer in transaction mode (tests.pooling)."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlencode

import pytest
from django.urls import URLPattern

from core.tenancy import tenant_scope
from memory import urls as memory_urls
from memory.models import MemoryItem
from memory.procedures.models import Procedure
from retrieval import urls as retrieval_urls
from retrieval.models import Document, Principal
from runs import api_urls as runs_urls
from runs.engine.runs import run_start
from runs.kernel.models import AgentRun, Approval, ToolOperation
from tests.api.conftest import MEMORY_WRITE, PROVENANCE, key_client, seed_tenant

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("database_path")]

# Views scoped by the key alone: they take no tenant and name no object, so there is nothing of
# another tenant to ask for (test_key_scoped_views_see_only_the_keys_tenant shows what they return).
KEY_SCOPED = {"WorkerClaimApi", "ExternalWorkflowApi"}
API_PATTERNS: list[URLPattern] = [
    p
    for p in [*runs_urls.urlpatterns, *memory_urls.urlpatterns, *retrieval_urls.urlpatterns]
    if hasattr(p.callback, "view_class")  # not the JSON 404 of unmatched URLs
    and p.callback.view_class.__name__ not in KEY_SCOPED
]
METHODS = ("get", "post", "put", "patch", "delete")
QUERIES = {"MemoryItemsApi": {"subject_id": "c-1"}, "MemorySearchApi": {"query": "language"}}


def _body(view: str, tenant: str, theirs: dict[str, Any]) -> dict[str, Any]:
    """A valid body for each write view, so that only the tenant can make the request fail."""
    bodies: dict[str, dict[str, Any]] = {
        "RunStartApi": {"tenant": tenant, "workflow": "demo.countdown", "input": {"n": 1}},
        "RunCancelApi": {"note": "x"},
        "RunResumeApi": {"note": "x"},
        "RunAcceptStateApi": {"note": "x"},
        "RunForkApi": {"at_seq": 1},
        "LangGraphAnswerApi": {"answer": "yes"},
        "RunRewindApi": {"to_seq": 1},
        "WebhookListApi": {
            "tenant": tenant,
            "url": "https://hooks.example.com/x",
            "event_types": ["run.completed"],
        },
        # The worker protocol about their run: refused before the body or the lease token is read.
        "RunSignalApi": {"payload": 1},
        "ScheduleListApi": {
            "tenant": tenant,
            "workflow": "demo.countdown",
            "interval_seconds": 60,
            "input": {"n": 1},
        },
        "ScheduleDetailApi": {"tenant": tenant, "enabled": False},
        "WorkerCommitApi": {},
        "WorkerHeartbeatApi": {},
        "WorkerReleaseApi": {},
        "WorkerLookupsApi": {},
        "WorkerApprovalApi": {},
        "WorkerOperationPrepareApi": {},
        "WorkerOperationStartedApi": {},
        "WorkerOperationOutcomeApi": {},
        "RunMessagesApi": {"type": "user_message", "client_message_id": "m-1", "content": "hi"},
        "ApprovalApproveApi": {"note": "x"},
        "ApprovalRejectApi": {"note": "x"},
        "OperationReconcileApi": {"outcome": "not_applied", "note": "x"},
        "OperationCorrectApi": {"outcome": "not_applied", "note": "x"},
        "MemoryItemsApi": {
            "tenant": tenant,
            "subject_id": "c-1",
            "namespace": "n",
            "key": "k",
            "value": 1,
            "provenance": PROVENANCE,
        },
        "MemoryItemSupersedeApi": {"tenant": tenant, "value": "en", "provenance": PROVENANCE},
        "MemoryItemInvalidateApi": {"tenant": tenant, "reason": "x"},
        "ErasureRequestsApi": {"tenant": tenant, "subject_id": "c-1"},
        "MemoryWriteApi": {
            "tenant": tenant,
            "subject_id": "c-1",
            "text": "likes tea",
            "source": "agent:x",
            "consent_basis": "explicit",
        },
        "MemoryFileApi": {"tenant": tenant, "content": ""},
        "MemorySearchApi": {"tenant": tenant, "query": "language"},
        "MemoryPendingConfirmApi": {"tenant": tenant},
        "RunProceduresLearnApi": {},
        "RunReplayApi": {"at_seq": 1},
        "EvalSetListApi": {"tenant": tenant, "name": "theirs"},
        "EvalSetRunApi": {"run_id": theirs["run_id"]},
        "EvalSetRoundApi": {},
        "RunMergeApi": {},
        "RunMergeResolveApi": {"picks": [{"id": "plan.md#0", "take": "ours"}]},
        "RunMergeAbandonApi": {},
        "ProcedureApi": {"tenant": tenant, "trigger": "refund"},
        "ProcedureConfirmApi": {"tenant": tenant, "note": "x"},
        "ProcedureRejectApi": {"tenant": tenant, "note": "x"},
        "DocumentsApi": {
            "tenant": tenant,
            "document_id": "d-1",
            "source_uri": "s3://d-1",
            "source_version": "1",
            "acl": ["group:support"],
            "text": "hello",
        },
        "DocumentAclApi": {"tenant": tenant, "acl": ["group:support"]},
        "PrincipalsApi": {"tenant": tenant, "principal": "user:bob", "groups": []},
        # Their run's id, in our own tenant's search: the run does not exist for us.
        "SearchApi": {
            "tenant": tenant,
            "principal": "user:acme-ann",
            "query": "refunds",
            "run_id": theirs["operation_run_id"],
        },
    }
    return bodies[view]


def _url(pattern: URLPattern, theirs: dict[str, Any]) -> str:
    route = str(pattern.pattern)
    return "/api/v1/" + re.sub(r"<(?:\w+:)?(\w+)>", lambda m: str(theirs[m[1]]), route)


def _walk(theirs: dict[str, Any]) -> list[tuple[str, str, str, bool]]:
    """(view, method, url, has object) for every pattern and method of the API."""
    calls = []
    for pattern in API_PATTERNS:
        view = pattern.callback.view_class  # type: ignore[attr-defined]
        for method in METHODS:
            if hasattr(view, method):
                calls.append((view.__name__, method, _url(pattern, theirs), "<" in str(pattern.pattern)))
    return calls


def _snapshot_of_their_state(theirs: dict[str, Any], tenant) -> tuple[Any, ...]:
    with tenant_scope(tenant.tenant_id):
        return (
            sorted(AgentRun.objects.filter(tenant=tenant).values_list("run_id", "status", "state_revision")),
            list(Approval.objects.filter(tenant=tenant).values_list("status", flat=True)),
            list(ToolOperation.objects.filter(tenant=tenant).values_list("status", flat=True)),
            sorted(MemoryItem.objects.filter(tenant=tenant).values_list("memory_id", "invalidated_at")),
            sorted(Document.objects.values_list("document_id", "acl")),
            sorted(Principal.objects.values_list("principal", "groups")),
            sorted(Procedure.objects.filter(tenant=tenant).values_list("procedure_id", "status", "version")),
        )


def test_a_key_gets_404_for_every_url_of_another_tenant(tenant, other_tenant, write_key):
    seed_tenant(tenant)
    theirs = seed_tenant(other_tenant)
    before = _snapshot_of_their_state(theirs, other_tenant)
    client = key_client(write_key)
    calls = _walk(theirs)
    assert len(calls) == sum(sum(hasattr(p.callback.view_class, m) for m in METHODS) for p in API_PATTERNS)
    answered = []
    for view, method, url, has_object in calls:
        # Their object in our tenant, their object naming their tenant, and (collections) their tenant.
        tenants = ["acme", "globex"] if has_object else ["globex"]
        if view == "ApprovalListApi":
            tenants = ["globex"]
        if view == "MemoryFileApi":  # a subject id is no object of theirs: in acme it is acme's subject
            tenants = ["globex"]
        for named in tenants:
            if method in ("get", "delete"):
                query = urlencode({"tenant": named, **QUERIES.get(view, {})})
                response = getattr(client, method)(f"{url}?{query}")
            else:
                response = getattr(client, method)(url, _body(view, named, theirs), format="json")
            assert response.status_code == 404, (view, method, url, named, response.content)
            assert set(response.json()["error"]) == {"code", "message", "details"}
            answered.append((view, method, named))
    assert _snapshot_of_their_state(theirs, other_tenant) == before
    assert {(view, method) for view, method, _ in answered} == {(v, m) for v, m, _, _ in calls}


def test_key_scoped_views_see_only_the_keys_tenant(tenant, other_tenant, write_key):
    from runs.external.workflows import external_workflow_register

    seed_tenant(tenant)
    seed_tenant(other_tenant)
    with tenant_scope(other_tenant.tenant_id):
        external_workflow_register(
            tenant=other_tenant, name="ext.theirs", version="1", steps=["a"], actor="t"
        )
        theirs = run_start(tenant=other_tenant, workflow_name="ext.theirs", input={}, actor="t").run
    client = key_client(write_key)
    assert client.get("/api/v1/workflows/external/").json() == []
    claimed = client.post(
        "/api/v1/workers/claim", {"workflows": ["ext.theirs"], "wait_seconds": 0}, format="json"
    )
    # Their workflow does not exist for this key: nothing of theirs is granted or named.
    assert claimed.status_code == 404 and claimed.json()["error"]["code"] == "unknown_workflow"
    with tenant_scope(other_tenant.tenant_id):
        assert AgentRun.objects.get(run_id=theirs.run_id).lease_owner is None


def test_an_approval_list_shows_only_the_keys_tenant(tenant, other_tenant, write_key):
    ours = seed_tenant(tenant)
    seed_tenant(other_tenant)
    listed = key_client(write_key).get("/api/v1/approvals/").json()["results"]
    assert [a["approval_id"] for a in listed] == [ours["approval_id"]]


def test_a_key_omitting_the_tenant_works_in_its_own(tenant, write_key):
    ours = seed_tenant(tenant)
    client = key_client(write_key)
    assert client.get(f"/api/v1/runs/{ours['run_id']}/").status_code == 200
    assert client.get(f"/api/v1/retrieval/documents/{ours['document_id']}/").status_code == 200
    assert client.get(f"/api/v1/erasure-requests/{ours['request_id']}/").status_code == 200
    started = client.post("/api/v1/runs/", {"workflow": "demo.countdown", "input": {"n": 1}}, format="json")
    assert started.status_code == 201 and started.json()["tenant"] == "acme"
    assert (
        client.get("/api/v1/memory/items/?tenant=acme&subject_id=c-1").json()["results"][0]["value"] == "de"
    )
    decided = client.post(f"/api/v1/approvals/{ours['approval_id']}/approve", {"note": "ok"}, format="json")
    assert decided.status_code == 200 and re.fullmatch(r"api_key:[0-9a-f]{12}", decided.json()["decided_by"])


def test_a_superuser_s_session_sees_every_tenant(tenant, other_tenant, django_user_model):
    from rest_framework.test import APIClient

    theirs = seed_tenant(other_tenant)
    client = APIClient()
    client.force_authenticate(
        django_user_model.objects.create_user("ops", password="pw", is_staff=True, is_superuser=True)
    )
    assert client.get(f"/api/v1/runs/{theirs['run_id']}/").status_code == 200
    unnamed = client.post("/api/v1/runs/", {"workflow": "demo.countdown", "input": {}}, format="json")
    assert unnamed.status_code == 400 and unnamed.json()["error"]["details"] == {
        "tenant": ["This field is required."]
    }
    assert (
        client.get(f"/api/v1/retrieval/documents/{theirs['document_id']}/?tenant=globex").status_code == 200
    )


def test_a_staff_session_acts_only_for_its_tenants_with_its_roles_and_is_audited(
    tenant, other_tenant, django_user_model
):
    """Django's staff flag alone (a support user of one tenant, or one with no role) does not let a
    user start runs and erase subjects in every tenant through the API, unaudited: a session has the
    console's tenants and roles, and its changes are audited."""
    from django.contrib.auth.models import Group
    from rest_framework.test import APIClient

    from console.models import AuditEntry, Membership

    theirs = seed_tenant(other_tenant)
    ours = seed_tenant(tenant)
    support = django_user_model.objects.create_user("staff-support", password="pw", is_staff=True)
    support.groups.add(Group.objects.get_or_create(name="support")[0])
    Membership.objects.create(user=support, tenant=tenant)
    client = APIClient()
    client.force_authenticate(support)
    assert client.get(f"/api/v1/runs/{theirs['run_id']}/").status_code == 404
    assert client.get(f"/api/v1/runs/{ours['run_id']}/").status_code == 200
    elsewhere = client.post(
        "/api/v1/runs/", {"workflow": "demo.countdown", "input": {"n": 1}, "tenant": "globex"}, format="json"
    )
    assert elsewhere.status_code == 404 and elsewhere.json()["error"]["code"] == "unknown_tenant"
    erase = client.post("/api/v1/erasure-requests/", {"subject_id": "c-1", "tenant": "acme"}, format="json")
    assert erase.status_code == 403 and "compliance role" in erase.json()["error"]["message"]
    started = client.post(
        "/api/v1/runs/", {"workflow": "demo.countdown", "input": {"n": 1}, "tenant": "acme"}, format="json"
    )
    assert started.status_code == 201, started.content
    entries = list(AuditEntry.objects.filter(actor="user:staff-support", action="api").order_by("id"))
    assert [(e.details["method"], e.details["status"]) for e in entries] == [
        ("POST", 404),
        ("POST", 403),
        ("POST", 201),
    ]
    assert entries[-1].details["route"] == "api/v1/runs/"
    assert entries[-1].tenant == tenant  # the tenant's own staff see it in their audit log
    # A Basic Authorization header (not a key) does not skip the audit.
    cancel = client.post(
        f"/api/v1/runs/{ours['run_id']}/cancel",
        {"note": "sneaky"},
        format="json",
        HTTP_AUTHORIZATION="Basic Zm9vOmJhcg==",
    )
    assert cancel.status_code in (200, 409), cancel.content
    sneaky = AuditEntry.objects.filter(actor="user:staff-support", action="api").order_by("-id").first()
    assert sneaky.details["route"].endswith("cancel") and sneaky.tenant == tenant

    decided = client.post(f"/api/v1/approvals/{ours['approval_id']}/approve", {"note": "ok"}, format="json")
    assert decided.status_code == 409, decided.content  # its run was cancelled above: still audited
    approval_entry = (
        AuditEntry.objects.filter(actor="user:staff-support", action="api").order_by("-id").first()
    )
    assert approval_entry.details["route"].endswith("approve") and approval_entry.tenant == tenant
    # Each change needs its console role: a support session cannot rewind or write memory, a
    # compliance one cannot fork, cancel or subscribe webhooks.
    for path, body in [
        (f"/api/v1/runs/{ours['run_id']}/rewind", {"to_seq": 1}),
        ("/api/v1/webhooks/", {"url": "https://hooks.example.com/k", "event_types": ["run.completed"]}),
        ("/api/v1/memory/write", {**MEMORY_WRITE, "tenant": "acme"}),
    ]:
        refused = client.post(path, body, format="json")
        assert refused.status_code == 403 and "role" in refused.json()["error"]["message"], (
            path,
            refused.content,
        )

    no_role = django_user_model.objects.create_user("staff-noroles", password="pw", is_staff=True)
    Membership.objects.create(user=no_role, tenant=tenant)
    bare = APIClient()
    bare.force_authenticate(no_role)
    refused = bare.get(f"/api/v1/runs/{ours['run_id']}/")
    assert refused.status_code == 403 and "no role" in refused.json()["error"]["message"]
