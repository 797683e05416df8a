"""An operation keyed by the subject's id, or whose external reference holds their text, does not
keep an erasure from ever completing (every erasure of cust-7781 failing on the key note:cust-7781)
nor stay after a clean receipt (mailto:ivo.brandt@example.com in external_ref)."""

from __future__ import annotations

import pytest

from core.tenancy import tenant_scope
from erasure.services import erasure_execute, erasure_request_create
from memory.services import memory_remember
from runs.engine.operations import operation_mark_started, operation_mark_succeeded, operation_prepare_once
from runs.engine.runs import run_start
from runs.kernel import apply
from runs.kernel import moves as m
from runs.kernel.models import ToolOperation
from tests.erasure.agreement import assert_registry_agrees
from tests.memory.test_memory import said

pytestmark = pytest.mark.django_db

SUBJECT = "cust-5550"
EMAIL = "ivo.brandt@example.com"


def _operation(tenant, run, grant, operation_id: str, *, outcome: str | None) -> None:
    operation_prepare_once(
        tenant_id=tenant.tenant_id,
        run_id=run.run_id,
        step_id="notify",
        operation_id=operation_id,
        tool_name="mail.send",
        tool_contract_version="mail.v1",
        request={"to": "customer"},
        actor="w1",
    )
    operation_mark_started(
        tenant_id=tenant.tenant_id,
        operation_id=operation_id,
        actor="w1",
        run_id=run.run_id,
        lease_epoch=grant.epoch,
    )
    if outcome:
        operation_mark_succeeded(
            tenant_id=tenant.tenant_id, operation_id=operation_id, actor="w1", external_ref=outcome, result={}
        )


def _cancelled_with_a_call_in_doubt(tenant) -> None:
    """A run of SUBJECT whose operation call:<SUBJECT> started with no outcome, then cancelled."""
    from runs.engine.runs import run_cancel

    run = run_start(
        tenant=tenant, workflow_name="demo.countdown", input={"n": 3}, actor="t", subject=SUBJECT
    ).run
    grant = apply(
        m.LeaseTaken(
            run_id=run.run_id,
            tenant_id=run.tenant_id,
            owner="w1",
            ttl=30,
        )
    )
    assert grant is not None
    _operation(tenant, run, grant, f"call:{SUBJECT}", outcome=None)  # started, no outcome: in doubt
    apply(
        m.LeaseReleased(
            run_id=run.run_id,
            tenant_id=run.tenant_id,
            owner="w1",
            epoch=grant.epoch,
        )
    )
    run_cancel(run_id=run.run_id, actor="user:ana", note="customer withdrew")


def _erase(tenant):
    request = erasure_request_create(tenant=tenant, subject_id=SUBJECT, requested_by="user:compliance")
    done = erasure_execute(tenant_id=tenant.tenant_id, request_id=request.request_id)
    assert_registry_agrees(done.receipt)
    return done


def test_decided_operations_lose_the_subject_and_one_in_doubt_is_named_until_reconciled(tenant) -> None:
    run = run_start(
        tenant=tenant, workflow_name="demo.countdown", input={"n": 3}, actor="t", subject=SUBJECT
    ).run
    grant = apply(
        m.LeaseTaken(
            run_id=run.run_id,
            tenant_id=run.tenant_id,
            owner="w1",
            ttl=30,
        )
    )
    assert grant is not None
    memory_remember(
        tenant=tenant,
        subject_id=SUBJECT,
        namespace="profile",
        key="email",
        value=EMAIL,
        provenance=said(run_id=str(run.run_id), seq=1),
    )
    _operation(tenant, run, grant, f"note:{SUBJECT}", outcome=f"mailto:{EMAIL}")
    _operation(tenant, run, grant, "refund:o-9", outcome="re_123")
    _operation(tenant, run, grant, f"call:{SUBJECT}", outcome=None)  # started, no outcome: in doubt
    apply(
        m.LeaseReleased(
            run_id=run.run_id,
            tenant_id=run.tenant_id,
            owner="w1",
            epoch=grant.epoch,
        )
    )

    done = _erase(tenant)
    assert done.receipt["clean"] is False
    # Only the key still in doubt (and the subject's memory, kept until nothing else holds their data).
    left = {p["place"]: p["after"] for p in done.receipt["places"] if p["after"]}
    assert {k: n for k, n in left.items() if not k.startswith("memory_")} == {
        "tool_operations.operation_id": 1
    }
    with tenant_scope(tenant.tenant_id):
        keys = sorted(ToolOperation.objects.values_list("operation_id", flat=True))
        refs = sorted(r for r in ToolOperation.objects.values_list("external_ref", flat=True) if r)
    assert keys[0] == f"call:{SUBJECT}" and keys[1].startswith("erased:") and keys[2] == "refund:o-9", keys
    assert refs[0].startswith("erased:") and refs[1] == "re_123", refs

    with tenant_scope(tenant.tenant_id):  # reconciled: the person learned the call did go through
        ToolOperation.objects.filter(operation_id=f"call:{SUBJECT}").update(
            status="succeeded", external_ref="c-1"
        )
    done = _erase(tenant)
    assert done.status == "completed" and done.receipt["clean"] is True, done.receipt["final_scan"]


def test_a_cancelled_run_s_operation_in_doubt_is_reconciled_and_the_erasure_then_completes(tenant) -> None:
    """A run cancelled (or completed by an outside worker) with an operation in doubt can be
    reconciled, not only a suspended run: otherwise its subject's erasure names the key on every
    request and never completes."""
    from runs.engine.operations import operation_reconcile

    _cancelled_with_a_call_in_doubt(tenant)
    assert _erase(tenant).receipt["clean"] is False
    operation_reconcile(
        tenant_id=tenant.tenant_id,
        operation_id=f"call:{SUBJECT}",
        actor="user:ana",
        note="the phone log shows the call",
        outcome="applied",
        external_ref="c-1",
    )
    done = _erase(tenant)
    assert done.status == "completed" and done.receipt["clean"] is True, done.receipt["final_scan"]
    with tenant_scope(tenant.tenant_id):
        [key] = ToolOperation.objects.values_list("operation_id", flat=True)
    assert key.startswith("erased:")


def test_a_reconciled_operation_keyed_by_the_subject_leaves_nothing_that_blocks_erasure(
    tenant, client
) -> None:
    """Reconciling in the console an operation whose key embeds the subject's id must not write that
    key as the audit entry's target (never erasable, so every later erasure would fail); and a refund
    confirmed not applied on a cancelled run must not go back to prepared and keep its key."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group

    from console.models import Membership

    _cancelled_with_a_call_in_doubt(tenant)
    user = get_user_model().objects.create_user("sup", password="pw-for-tests")
    user.groups.add(Group.objects.get_or_create(name="support")[0])
    Membership.objects.create(user=user, tenant=tenant)
    client.force_login(user)
    with tenant_scope(tenant.tenant_id):
        op = ToolOperation.objects.get()
    answer = client.post(
        f"/support/operations/{op.pk}/reconcile/",
        {"note": "the call log shows nothing", "outcome": "not_applied"},
    )
    assert answer.status_code == 302, answer.content
    with tenant_scope(tenant.tenant_id):
        assert ToolOperation.objects.get().status == "prepared"
    done = _erase(tenant)
    assert done.status == "completed" and done.receipt["clean"] is True, done.receipt["final_scan"]
    with tenant_scope(tenant.tenant_id):
        [key] = ToolOperation.objects.values_list("operation_id", flat=True)
    assert key.startswith("erased:")
