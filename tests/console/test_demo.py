"""The demo content `make run` loads once: every interesting state, reached through the services."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from console.demo import demo_load
from console.models import AuditEntry
from core.models import Tenant
from core.tenancy import tenant_scope
from erasure.models import ErasureRequest
from memory.models import MemoryItem
from retrieval.models import Document
from runs.engine.schedule_models import WorkflowSchedule
from runs.kernel.models import AgentRun, Approval, ToolOperation

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_the_demo_has_every_state_and_loads_once(live_server, settings, tmp_path):
    settings.KEEPER_SANDBOX_URL = live_server.url + "/sandbox"
    settings.KEEPER_PAYMENTS_TIMEOUT = 1.0
    result = demo_load(data_dir=tmp_path)
    assert result.loaded and set(result.credentials) >= {"acme-support", "acme-compliance", "acme-engineer"}
    acme = Tenant.objects.get(slug="acme")
    with tenant_scope(acme.tenant_id):  # row-level security: the demo's runs are acme's
        runs = {name: AgentRun.objects.get(run_id=run_id) for name, run_id in result.runs.items()}
        unknown_operation = ToolOperation.objects.get(run=runs["unknown_operation"])
    assert runs["completed"].status == "completed"
    assert runs["forked"].parent_run_id == runs["completed"].run_id and runs["forked"].fork_seq == 2
    assert (runs["awaiting_approval"].status, runs["awaiting_approval"].suspend_reason) == (
        "suspended",
        "approval_required",
    )
    # The support agent's conversation waits for a person to approve the refund it proposed.
    assert (runs["support_agent"].workflow_name, runs["support_agent"].suspend_reason) == (
        "support_agent",
        "approval_required",
    )
    with tenant_scope(acme.tenant_id):
        pending = Approval.objects.get(run=runs["support_agent"], status="pending")
        assert pending.request == {"order_id": "ord-1003", "amount_minor": 3500, "currency": "EUR"}
        assert MemoryItem.objects.get(subject_id="cust-1003").value == "email for updates"
    assert runs["unknown_operation"].suspend_reason == "reconciliation_required"
    assert unknown_operation.status == "unknown"
    assert runs["refused_resume"].suspend_reason == "state_digest_mismatch"
    assert runs["unsupported_checkpoint"].suspend_reason == "unsupported_checkpoint"
    assert runs["langgraph_interrupt"].suspend_reason == "langgraph_interrupt"  # in the support inbox
    assert "Refund order A-1001" in runs["langgraph_interrupt"].suspend_detail
    # A credit limit waits for a person (its workflow declares how the approval reads), a small one
    # (approved by policy) for the customer's documents, a signal an engineer can send.
    assert runs["credit_awaiting_approval"].suspend_reason == "approval_required"
    assert (
        runs["credit_waiting_for_documents"].suspend_reason,
        runs["credit_waiting_for_documents"].next_step,
    ) == (
        "signal",
        "wait_for_documents",
    )
    with tenant_scope(acme.tenant_id):
        # Four customers' graphs ask support, as Agent Inbox asks, and a paused schedule is there to edit.
        asked = AgentRun.objects.filter(workflow_name="langgraph", suspend_reason="langgraph_interrupt")
        assert asked.count() == 4
        assert list(WorkflowSchedule.objects.values_list("workflow_name", "enabled")) == [
            ("demo.countdown", False)
        ]
        assert MemoryItem.objects.filter(subject_id="cust-1001").count() == 3  # one superseded
        assert Document.objects.filter(status="indexed").count() == 2
        erasure = ErasureRequest.objects.get()
        assert erasure.status == "completed"
    # What people did in the demo is in the audit log like any other action.
    audited = {(e.actor, e.action, e.target_type) for e in AuditEntry.objects.filter(tenant=acme)}
    assert {
        ("user:acme-compliance", "erase", "erasure_request"),
        ("user:acme-support", "approve", "approval"),
        ("user:acme-engineer", "fork", "run"),
        ("user:acme-engineer", "suspend", "run"),
        ("user:acme-support", "resume", "run"),
    } <= audited
    [erase] = AuditEntry.objects.filter(action="erase", tenant=acme)
    assert erase.target_id == str(erasure.request_id) and "cust-2002" not in erase.note + str(erase.details)
    assert (tmp_path / "demo-credentials.txt").stat().st_mode & 0o077 == 0
    users = get_user_model().objects.count()
    assert not demo_load(data_dir=tmp_path).loaded and get_user_model().objects.count() == users


def test_with_debug_off_the_command_says_the_demo_is_loaded_or_why_it_is_not(settings, tmp_path):
    """`make run` with DEBUG=false after a first run with the demo says the demo is already loaded,
    not an error ("development only")."""
    from io import StringIO

    from django.core.management import CommandError, call_command

    from console.demo import MARKER

    settings.DEBUG, settings.DATA_DIR = False, tmp_path
    with pytest.raises(CommandError, match="development only"):
        call_command("keeper_demo")
    (tmp_path / MARKER).write_text("loaded")
    out = StringIO()
    call_command("keeper_demo", stdout=out)
    assert "demo already loaded" in out.getvalue()
