"""Demo content for a new user's first `make run`: every console screen has something to show.

Everything is made through the same services the product uses, and the refund runs talk to the
payments sandbox over HTTP as they would in production: the runs awaiting approval (a refund, a
support_agent conversation, a credit limit) and the one with an unknown operation got there by running. Two states a demo cannot reach by running are set the way
they arise in real life: a state edited outside the engine (a refused resume) and a checkpoint from a
newer schema after a rollback (unsupported checkpoint). Loaded once; development only.
"""

from __future__ import annotations

import json
import secrets
import time
import urllib.request
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group

from console.models import AuditEntry, Membership
from console.roles import ROLES
from core.tenancy import tenant_bind, tenant_ensure, tenant_scope
from erasure.services import erasure_execute, erasure_request_create
from memory.services import memory_remember, memory_supersede
from retrieval.services import document_index, principal_set
from runs.conversations.messages import conversation_append
from runs.conversations.procedures import run_procedures_learn
from runs.engine.approvals import approval_approve
from runs.engine.forks import run_fork
from runs.engine.runs import run_resume, run_start, run_suspend
from runs.engine.schedules import schedule_create
from runs.engine.steps import run_advance
from runs.kernel import apply
from runs.kernel import moves as m
from runs.kernel.models import AgentRun

MARKER = "demo-loaded.txt"


@dataclass
class DemoResult:
    loaded: bool
    credentials: dict[str, str] = field(default_factory=dict)
    runs: dict[str, str] = field(default_factory=dict)


def _sandbox(method: str, path: str, body: Any = None) -> Any:
    request = urllib.request.Request(
        settings.KEEPER_SANDBOX_URL + path,
        method=method,
        data=json.dumps(body).encode() if body is not None else None,
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read() or b"null")


def _order(order_id: str, amount_minor: int, customer_id: str = "cust-1001") -> None:
    """A delivered order of the customer whose runs ask about it (each customer's data stays in
    their own runs, so erasing one finds nothing of them in another's)."""
    delivered = (datetime.now(UTC) - timedelta(days=3)).isoformat()
    _sandbox(
        "POST",
        "/orders",
        {
            "order_id": order_id,
            "customer_id": customer_id,
            "amount_minor": amount_minor,
            "currency": "EUR",
            "status": "delivered",
            "delivered_at": delivered,
        },
    )


def _drive(run: AgentRun, limit: int = 30, settle: float = 0.0) -> AgentRun:
    """Advance the run in this process; with `settle`, keep at it (through retry backoff) until it is
    no longer running or that many seconds have passed."""
    deadline, commits = time.monotonic() + settle, 0
    while commits < limit:
        outcome = run_advance(run_id=run.run_id, worker_id="demo-loader").outcome
        with tenant_bind(run.tenant_id):  # row-level security: read it back as its tenant
            run.refresh_from_db()
        if outcome == "committed":
            commits += 1
        elif run.status != "running" or time.monotonic() > deadline:
            break
        else:
            time.sleep(0.2)
    return run


def _user(
    username: str, roles: tuple[str, ...], tenants: tuple[Any, ...], credentials: dict[str, str]
) -> None:
    users = get_user_model()
    if users.objects.filter(username=username).exists():
        return
    password = secrets.token_urlsafe(12)
    user = users.objects.create_user(username, password=password)
    for role in roles:
        user.groups.add(Group.objects.get_or_create(name=role)[0])
    for tenant in tenants:
        with tenant_scope(tenant.tenant_id):  # row-level security: written as that tenant
            Membership.objects.create(user=user, tenant=tenant)
    credentials[username] = password


def _said(run_id: str, seq: int) -> dict[str, Any]:
    return {
        "source_type": "user_statement",
        "source_id": f"run:{run_id}",
        "source_version": None,
        "run_id": run_id,
        "event_seq": seq,
        "validation_method": "user_statement",
    }


# The example graph's threads: customers asking about their orders (the first one is a known subject).
LANGGRAPH_THREADS = (
    ("demo-support-1", "Hello, order A-1001 arrived broken. Can I get my money back?", "cust-1001"),
    ("demo-support-2", "Order A-1003 came in the wrong size, I would like a refund.", ""),
    ("demo-support-3", "My order A-1004 is two weeks late, please refund it.", ""),
    ("demo-support-4", "Order A-1005 never arrived. Refund please.", ""),
)


def _langgraph_threads(tenant: Any) -> str | None:
    """The example graph's threads, each waiting for a person's approval (Agent Inbox's question);
    the first one's run id (None without the langgraph extra)."""
    try:
        from runs.langgraph.example import support_thread_start
    except ImportError:
        return None
    for thread_id, message, subject in LANGGRAPH_THREADS:
        support_thread_start(
            tenant_id=tenant.tenant_id, thread_id=thread_id, message=message, subject_id=subject
        )
    return str(AgentRun.objects.get(tenant=tenant, idempotency_key="langgraph:demo-support-1").run_id)


def _credit_runs(tenant: Any) -> dict[str, str]:
    """A credit-limit increase waiting for a person's approval (the workflow declares how it reads) and
    a small one, approved by policy, waiting for the customer's documents (a signal)."""
    runs = {}
    for name, subject, current, requested in (
        ("credit_awaiting_approval", "cust-1001", 100_000, 250_000),
        ("credit_waiting_for_documents", "cust-1004", 100_000, 140_000),
    ):
        started = run_start(
            tenant=tenant,
            workflow_name="demo.credit",
            subject=subject,
            actor="demo",
            input={
                "customer_id": subject,
                "current_limit_minor": current,
                "requested_limit_minor": requested,
                "currency": "EUR",
            },
        ).run
        runs[name] = str(_drive(started).run_id)
    return runs


def _audited(
    *, actor: str, action: str, tenant: Any, target_type: str, target_id: Any, note: str, **details: Any
) -> None:
    """The audit entry the console writes for the same action by a person (details.via says demo)."""
    AuditEntry.objects.create(
        actor=actor,
        tenant=tenant,
        action=action,
        target_type=target_type,
        target_id=str(target_id),
        note=note,
        details={**details, "via": "demo"},
    )


def _support_conversation(tenant: Any) -> str:
    """The support_agent (the rule stand-in unless settings name a model) talking with a customer:
    it remembers a confirmed preference, looks an order up and waits for a refund's approval."""
    _order("ord-1003", 3500, customer_id="cust-1003")
    run = _drive(
        run_start(
            tenant=tenant, workflow_name="support_agent", subject="cust-1003", actor="demo", input={}
        ).run
    )
    for cmid, text in (
        ("demo-1", "Yes, please remember that I prefer email for updates."),
        ("demo-2", "Order ord-1003 arrived damaged. Can I get a refund?"),
    ):
        conversation_append(
            tenant=tenant,
            run_id=run.run_id,
            event_type="user_message",
            client_message_id=cmid,
            body={"content": text},
            actor="user:cust-1003",
        )
        run = _drive(run)
    return str(run.run_id)


def demo_load(*, data_dir: Path) -> DemoResult:
    """Load the demo once (a marker file in the data folder); later calls change nothing."""
    marker = data_dir / MARKER
    if marker.exists():
        return DemoResult(loaded=False)
    acme, globex = tenant_ensure(slug="acme", name="Acme Retail"), tenant_ensure(slug="globex", name="Globex")
    result = DemoResult(loaded=True)
    for role in ROLES:
        _user(f"acme-{role}", (role,), (acme,), result.credentials)
    _user("globex-support", ("support",), (globex,), result.credentials)
    _user("operator", ROLES, (acme, globex), result.credentials)

    # Row-level security: the loader works as Acme (services for Globex set Globex themselves).
    with tenant_bind(acme.tenant_id):
        # Runs in every state a person works with.
        done = _drive(
            run_start(tenant=acme, workflow_name="demo.countdown", input={"n": 4}, actor="demo").run
        )
        result.runs["completed"] = str(done.run_id)
        fork = run_fork(
            run_id=done.run_id,
            at_seq=2,
            actor="user:acme-engineer",
            start=False,
            note="try the last steps again",
        )
        _audited(
            actor="user:acme-engineer",
            action="fork",
            tenant=acme,
            target_type="run",
            target_id=done.run_id,
            note="try the last steps again",
            at_seq=2,
        )
        result.runs["forked"] = str(fork.run_id)
        for order_id, amount in (("ord-1001", 4999), ("ord-1002", 12900)):
            _order(order_id, amount)
        waiting = _drive(
            run_start(
                tenant=acme,
                workflow_name="refund",
                subject="cust-1001",
                actor="demo",
                input={"order_id": "ord-1001", "reason": "arrived broken"},
            ).run
        )
        result.runs["awaiting_approval"] = str(waiting.run_id)
        result.runs["support_agent"] = _support_conversation(acme)
        # The answered turn ("remember that I prefer email") as a procedure waiting for a person.
        run_procedures_learn(run_id=UUID(result.runs["support_agent"]))
        # The payments API applies the refund and the answer is lost; its lookup cannot say what happened.
        _sandbox("POST", "/faults", {"fault": "drop_after_apply", "order_id": "ord-1002", "remaining": 1})
        _sandbox(
            "POST",
            "/faults",
            {"fault": "lookup_non_authoritative", "order_id": "ord-1002", "remaining": None},
        )
        unknown = _drive(
            run_start(
                tenant=acme,
                workflow_name="refund",
                subject="cust-1001",
                actor="demo",
                input={"order_id": "ord-1002", "reason": "never arrived"},
            ).run
        )
        if unknown.suspend_reason == "approval_required":
            from runs.kernel.models import Approval

            approval = Approval.objects.get(run=unknown, status="pending")
            approval_approve(
                approval_id=approval.approval_id, actor="user:acme-support", note="policy allows it"
            )
            _audited(
                actor="user:acme-support",
                action="approve",
                tenant=acme,
                target_type="approval",
                target_id=approval.approval_id,
                note="policy allows it",
                run_id=str(unknown.run_id),
                request_digest=approval.request_digest,
            )
            unknown = _drive(unknown, settle=20)
        result.runs["unknown_operation"] = str(unknown.run_id)
        edited = _drive(
            run_start(tenant=acme, workflow_name="demo.countdown", input={"n": 6}, actor="demo").run, limit=2
        )
        run_suspend(
            run_id=edited.run_id, actor="user:acme-engineer", reason="operator_pause", detail="looking at it"
        )
        edited.refresh_from_db()  # someone "fixed" the state by hand, outside the engine
        apply(m.StateAlteredOutside(edited.run_id, edited.tenant_id, state={**edited.state, "remaining": 99}))
        run_resume(run_id=edited.run_id, actor="user:acme-support", note="should be fine now")
        for actor, action, note in (
            ("user:acme-engineer", "suspend", "looking at it"),
            ("user:acme-support", "resume", "should be fine now"),
        ):
            _audited(
                actor=actor, action=action, tenant=acme, target_type="run", target_id=edited.run_id, note=note
            )
        result.runs["refused_resume"] = str(_drive(edited, limit=1).run_id)
        rolled = _drive(
            run_start(tenant=acme, workflow_name="demo.countdown", input={"n": 6}, actor="demo").run, limit=2
        )
        run_suspend(
            run_id=rolled.run_id,
            actor="user:acme-engineer",
            reason="operator_pause",
            detail="deploy rollback",
        )
        # a checkpoint written by a newer release, then rolled back
        apply(m.StateAlteredOutside(rolled.run_id, rolled.tenant_id, state_schema_version=99))
        run_resume(run_id=rolled.run_id, actor="user:acme-support", note="after the rollback")
        for actor, action, note in (
            ("user:acme-engineer", "suspend", "deploy rollback"),
            ("user:acme-support", "resume", "after the rollback"),
        ):
            _audited(
                actor=actor, action=action, tenant=acme, target_type="run", target_id=rolled.run_id, note=note
            )
        result.runs["unsupported_checkpoint"] = str(_drive(rolled, limit=1).run_id)
        run_start(tenant=globex, workflow_name="demo.countdown", input={"n": 2}, actor="demo")
        # LangGraph threads (the example support graph) stopped at their approval interrupt().
        thread = _langgraph_threads(acme)
        if thread is not None:
            result.runs["langgraph_interrupt"] = thread
        result.runs.update(_credit_runs(acme))
        # A schedule, paused: the schedules page has one to show, and it starts nothing by itself.
        schedule_create(
            tenant=acme,
            workflow_name="demo.countdown",
            input={"n": 3},
            actor="user:acme-engineer",
            interval_seconds=86_400,
            enabled=False,
        )

        # Memory with provenance (one claim superseded), documents with ACLs, and one finished erasure.
        run_id = result.runs["awaiting_approval"]
        language = memory_remember(
            tenant=acme,
            subject_id="cust-1001",
            namespace="preference",
            key="language",
            value="English",
            provenance=_said(run_id, 1),
        )
        memory_supersede(
            tenant=acme, memory_id=language.memory_id, value="answer in German", provenance=_said(run_id, 3)
        )
        memory_remember(
            tenant=acme,
            subject_id="cust-1001",
            namespace="constraint",
            key="contact_channel",
            value="email only, never phone",
            provenance=_said(run_id, 2),
        )
        principal_set(tenant=acme, principal="user:acme-support", groups=["group:support"], actor="demo")
        document_index(
            tenant=acme,
            document_id="refund-policy",
            source_uri="kb://policies/refunds.md",
            source_version="v3",
            data=b"# Refund policy\n\nDelivered orders may be refunded within 30 days.\n\n## Approvals\n\n"
            b"Refunds above 40 EUR need a person's approval.",
            media_type="text/markdown",
            acl=["group:support"],
            actor="demo",
            wait=True,
        )
        document_index(
            tenant=acme,
            document_id="salary-bands",
            source_uri="kb://hr/salaries.md",
            source_version="v1",
            data=b"Salary bands are confidential.",
            media_type="text/markdown",
            acl=["group:hr"],
            actor="demo",
            wait=True,
        )
        memory_remember(
            tenant=acme,
            subject_id="cust-2002",
            namespace="profile",
            key="city",
            value="Lisbon",
            provenance=_said(run_id, 4),
        )
        erasure = erasure_request_create(
            tenant=acme, subject_id="cust-2002", requested_by="user:acme-compliance"
        )
        _audited(
            actor="user:acme-compliance",
            action="erase",
            tenant=acme,
            target_type="erasure_request",
            target_id=erasure.request_id,
            note="the customer asked to be forgotten (ticket DEMO-1)",
            subject_digest=erasure.subject_digest,
        )
        erasure_execute(tenant_id=acme.tenant_id, request_id=erasure.request_id)

    data_dir.mkdir(parents=True, exist_ok=True)
    credentials = data_dir / "demo-credentials.txt"
    credentials.touch(mode=0o600)
    credentials.write_text("".join(f"{name} {password}\n" for name, password in result.credentials.items()))
    marker.write_text(json.dumps(result.runs, indent=2) + "\n")
    return result
