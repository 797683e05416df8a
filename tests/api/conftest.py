"""API keys and a tenant with one object of every kind the API serves."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from rest_framework.test import APIClient

from core.api_auth import api_key_create
from core.models import Tenant
from core.tenancy import tenant_bind
from erasure.services import erasure_request_create
from memory.consent import ClaimPending
from memory.procedures.services import ProcedureTurn, procedure_learn
from memory.services import memory_remember
from retrieval.search import retrieval_search
from retrieval.services import document_index, principal_set
from runs.engine.approvals import approval_check
from runs.engine.operations import operation_mark_started, operation_mark_unknown, operation_prepare_once
from runs.engine.runs import run_start, run_suspend
from runs.engine.schedules import schedule_create
from runs.evaluation.services import eval_set_create
from runs.kernel import apply
from runs.kernel import moves as m
from runs.kernel.models import ToolOperation
from runs.webhooks.services import webhook_subscription_create

PROVENANCE = {
    "source_type": "user_statement",
    "source_id": "run:00000000-0000-0000-0000-000000000001",
    "source_version": None,
    "run_id": "00000000-0000-0000-0000-000000000001",
    "event_seq": 3,
    "validation_method": "user_statement",
}


def key_client(plaintext: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {plaintext}")
    return client


@pytest.fixture
def write_key(tenant):
    return api_key_create(tenant=tenant, name="ci", scope="write").plaintext


@pytest.fixture
def read_key(tenant):
    return api_key_create(tenant=tenant, name="dashboard", scope="read").plaintext


def seed_tenant(tenant: Tenant) -> dict[str, Any]:
    """A run waiting for an approval, a run with an unknown operation, a memory item, an erasure
    request, an indexed document, a principal, a retrieval snapshot and a webhook subscription:
    their ids by URL parameter."""
    with tenant_bind(tenant.tenant_id):  # written as that tenant, as its own requests would
        return _seed(tenant)


def _seed(tenant: Tenant) -> dict[str, Any]:
    waiting = run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": 1}, actor="test").run
    run_suspend(run_id=waiting.run_id, actor="test", reason="approval_required")
    approval = approval_check(
        run_id=waiting.run_id,
        tenant_id=tenant.tenant_id,
        step_id="approve",
        request={"order_id": "o-1", "amount_minor": 100, "currency": "EUR"},
        request_digest="sha256:x",
        reasons=["delivered"],
        actor="w",
    ).approval
    run = run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": 1}, actor="test").run
    grant = apply(
        m.LeaseTaken(
            run_id=run.run_id,
            tenant_id=run.tenant_id,
            owner="w",
            ttl=30,
        )
    )
    assert grant is not None
    operation_id = f"refund:{tenant.slug}"
    operation_prepare_once(
        tenant_id=tenant.tenant_id,
        run_id=run.run_id,
        step_id="refund",
        operation_id=operation_id,
        tool_name="payments.refund",
        tool_contract_version="payments.v1",
        request={"a": 1},
        actor="w",
    )
    operation_mark_started(
        tenant_id=tenant.tenant_id,
        operation_id=operation_id,
        actor="w",
        run_id=run.run_id,
        lease_epoch=grant.epoch,
    )
    operation_mark_unknown(tenant_id=tenant.tenant_id, operation_id=operation_id, actor="w", note="timeout")
    run_suspend(run_id=run.run_id, actor="w", reason="reconciliation_required")
    operation = ToolOperation.objects.get(tenant=tenant, operation_id=operation_id)
    item = memory_remember(
        tenant=tenant,
        subject_id="c-1",
        namespace="preferences",
        key="language",
        value="de",
        provenance=PROVENANCE,
    )
    try:  # an inference waiting for the subject's consent (the default policy: health needs explicit)
        memory_remember(
            tenant=tenant,
            subject_id="c-1",
            namespace="health",
            key="allergy",
            value="nuts",
            provenance={**PROVENANCE, "source_type": "tool_result"},
            consent_basis="inferred",
        )
    except ClaimPending as pending:
        pending_id = str(pending.details["pending_id"])
    else:
        raise AssertionError("the default consent policy holds an inferred health claim")
    erasure = erasure_request_create(tenant=tenant, subject_id="c-2", requested_by="test")
    document_id = f"policy-{tenant.slug}"
    document_index(
        tenant=tenant,
        document_id=document_id,
        source_uri=f"s3://kb/{document_id}.md",
        source_version="etag:1",
        data=b"# Refunds\n\nRefunds are paid within 14 days.",
        media_type="text/markdown",
        acl=["group:support"],
        actor="test",
        wait=True,
    )
    principal = f"user:{tenant.slug}-ann"
    principal_set(tenant=tenant, principal=principal, groups=["group:support"], actor="test")
    snapshot = retrieval_search(
        tenant=tenant, query="refunds", principal=principal, run_id=run.run_id
    ).snapshot
    webhook = webhook_subscription_create(
        tenant=tenant,
        url=f"https://hooks.example.com/{tenant.slug}",
        event_types=["run.completed"],
        actor="test",
    ).subscription
    schedule = schedule_create(
        tenant=tenant, actor="test", workflow_name="demo.countdown", input={"n": 1}, interval_seconds=3600
    )
    step = {"tool": "lookup_order", "arguments": {"order_id": "string"}}
    turn = ProcedureTurn(
        run_id=run.run_id, request_seq=1, reply_seq=2, subject_id="c-1", words=["refund"], steps=[step]
    )
    [procedure_id] = procedure_learn(tenant=tenant, workflow_name="support_agent", turns=[turn]).procedure_ids
    eval_set = eval_set_create(tenant=tenant, name="fuzzed", actor="test")
    return {
        "procedure_id": procedure_id,
        "set_id": str(eval_set.set_id),
        # A merge and an evaluation round need forks and replays run by a worker: ids naming no
        # object, so their lookups answer 404 (for tenant B's too, which is what is checked there).
        "merge_id": str(uuid.uuid4()),
        "round_id": str(uuid.uuid4()),
        "schedule_id": str(schedule.schedule_id),
        "run_id": str(waiting.run_id),
        "webhook_id": str(webhook.id),
        "operation_id": operation_id,
        "name": "shipped",  # a signal or query name: their run's does not exist for us either
        "operation_run_id": str(run.run_id),
        "approval_id": str(approval.approval_id),
        "pk": operation.pk,
        "memory_id": str(item.memory_id),
        "request_id": str(erasure.request_id),
        "document_id": document_id,
        "principal": principal,
        "snapshot_id": str(snapshot.snapshot_id),
        "pending_id": pending_id,
        "subject": "c-1",  # a subject id is the tenant's own name: theirs names one of ours too
    }


# A memory write the API takes (a test adds or changes a field).
MEMORY_WRITE = {
    "subject_id": "c-1",
    "namespace": "p",
    "key": "k",
    "value": "v",
    "source": "api",
    "consent_basis": "explicit",
}
