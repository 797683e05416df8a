"""Memory follows its sources: a claim whose event was rewound away, said in an abandoned fork or
redacted, or whose retrieval document changed, stops being current with the reason; the claim it
had superseded comes back when its own source still holds; a run retention deleted changes nothing."""

from __future__ import annotations

from typing import Any

import pytest

from core.tenancy import tenant_scope
from memory.erasure import erasure_execute, erasure_request_create
from memory.models import MemoryItem
from memory.selectors import memory_recall
from memory.services import memory_remember
from retrieval.services import document_delete, document_index
from runs.conversations.context import context_build
from runs.conversations.memory_sources import memory_sources_sweep
from runs.conversations.messages import conversation_append
from runs.engine.forks import run_fork, run_rewind
from runs.engine.runs import run_cancel, run_start
from runs.engine.steps import run_advance
from runs.kernel.models import AgentRun

pytestmark = pytest.mark.django_db


def _drive(run_id: Any) -> None:
    for _ in range(6):
        if run_advance(run_id=run_id).outcome != "committed":
            break


def _say(tenant, run, cmid: str, text: str) -> int:
    event = conversation_append(
        tenant=tenant,
        run_id=run.run_id,
        event_type="user_message",
        client_message_id=cmid,
        body={"content": text},
        actor=f"user:{run.subject}",
    ).event
    _drive(run.run_id)
    return event.seq


def _keep(tenant, subject, namespace, key, value, *, run_id=None, seq=None, source_id=None, version=None):
    return memory_remember(
        tenant=tenant,
        subject_id=subject,
        namespace=namespace,
        key=key,
        value=value,
        provenance={
            "source_type": "user_statement" if source_id is None else "tool_result",
            "source_id": source_id or f"run:{run_id}",
            "source_version": version,
            "run_id": None if run_id is None else str(run_id),
            "event_seq": seq,
            "validation_method": "user_statement" if source_id is None else "tool_verified",
        },
        consent_basis="explicit",
    )


def _current(tenant, subject) -> dict[str, Any]:
    return {f"{m.namespace}/{m.key}": m.value for m in memory_recall(tenant=tenant, subject_id=subject)}


def _reason(item) -> str:
    with tenant_scope(item.tenant_id):
        return MemoryItem.objects.get(memory_id=item.memory_id).invalidation_reason or ""


def _conversation(tenant, subject):
    run = run_start(tenant=tenant, workflow_name="conversation", input={}, actor="t", subject=subject).run
    _drive(run.run_id)
    return run


def test_a_rewind_takes_back_what_was_said_after_its_point_and_gives_back_what_it_replaced(tenant):
    run = _conversation(tenant, "cust-1")
    first = _say(tenant, run, "m-1", "Answer in German please.")
    second = _say(tenant, run, "m-2", "Actually, English. I live in Porto.")
    german = _keep(tenant, "cust-1", "preference", "language", "de", run_id=run.run_id, seq=first)
    english = _keep(tenant, "cust-1", "preference", "language", "en", run_id=run.run_id, seq=second)
    porto = _keep(tenant, "cust-1", "profile", "city", "Porto", run_id=run.run_id, seq=second)
    assert _current(tenant, "cust-1") == {"preference/language": "en", "profile/city": "Porto"}
    child = run_rewind(run_id=run.run_id, to_seq=first, actor="user:eng", note="take it back").run
    # The rewound run's first turn loads MEMORY.md: what was rewound away is not in it.
    built = context_build(run=AgentRun.objects.get(run_id=child.run_id), query="hello")
    memory = " ".join(m["content"] for m in built.messages if m["content"].startswith("[memory"))
    assert '"de"' in memory and "Porto" not in memory and '"en"' not in memory
    assert _current(tenant, "cust-1") == {"preference/language": "de"}
    assert _reason(english).startswith("source_rewound: event") and _reason(porto).startswith(
        "source_rewound"
    )
    assert _reason(german) == "superseded"  # its place is held by a new claim with its value and source
    [restored] = [m for m in memory_recall(tenant=tenant, subject_id="cust-1")]
    assert restored.provenance == german.provenance and restored.supersedes_id == english.memory_id
    assert memory_sources_sweep() == 0  # nothing left for the beat


def test_the_beat_invalidates_what_was_said_only_in_an_abandoned_fork(tenant):
    run = _conversation(tenant, "cust-2")
    said = _say(tenant, run, "m-1", "Email me, never call.")
    run.refresh_from_db()
    fork = run_fork(run_id=run.run_id, at_seq=run.state_revision, actor="user:eng")
    _drive(fork.run_id)
    own = _say(tenant, AgentRun.objects.get(run_id=fork.run_id), "m-f", "Call me Bo.")
    copied = AgentRun.objects.get(run_id=fork.run_id).events.get(payload__forked_from__seq=said).seq
    nickname = _keep(tenant, "cust-2", "profile", "nickname", "Bo", run_id=fork.run_id, seq=own)
    channel = _keep(tenant, "cust-2", "preference", "channel", "email", run_id=fork.run_id, seq=copied)
    kept_in_parent = _keep(tenant, "cust-2", "constraint", "phone", "never", run_id=run.run_id, seq=said)
    assert memory_sources_sweep() == 0  # a live fork is a source like any run
    run_cancel(run_id=fork.run_id, actor="user:eng", note="dead end")
    assert memory_sources_sweep() == 1
    assert _reason(nickname).startswith("source_fork_abandoned")
    assert set(_current(tenant, "cust-2")) == {"preference/channel", "constraint/phone"}
    assert kept_in_parent.memory_id in {
        m.memory_id for m in memory_recall(tenant=tenant, subject_id="cust-2")
    }
    assert channel.memory_id in {m.memory_id for m in memory_recall(tenant=tenant, subject_id="cust-2")}


def test_a_claim_whose_event_an_erasure_redacted_is_no_longer_current(tenant):
    run = _conversation(tenant, "cust-3")
    seq = _say(tenant, run, "m-1", "My colleague cust-4 handles the returns.")
    about_other = _keep(tenant, "cust-4", "profile", "role", "handles returns", run_id=run.run_id, seq=seq)
    request = erasure_request_create(tenant=tenant, subject_id="cust-3", requested_by="user:compliance")
    erasure_execute(tenant_id=tenant.tenant_id, request_id=request.request_id)
    assert memory_sources_sweep() == 1
    assert _reason(about_other).startswith("source_redacted") and _current(tenant, "cust-4") == {}


def test_a_claim_read_from_a_document_follows_the_document(tenant):
    for document_id in ("kb-1", "kb-2"):
        document_index(
            tenant=tenant,
            document_id=document_id,
            source_uri=f"kb://{document_id}",
            source_version="v1",
            data=b"Orders ship within two days.",
            media_type="text/plain",
            acl=["group:support"],
            actor="t",
            wait=True,
        )
    shipping = _keep(
        tenant, "cust-5", "contract", "shipping", "2 days", source_id="document:kb-1", version="v1"
    )
    returns = _keep(
        tenant, "cust-5", "contract", "returns", "30 days", source_id="document:kb-2", version="v1"
    )
    assert memory_sources_sweep() == 0
    document_index(
        tenant=tenant,
        document_id="kb-1",
        source_uri="kb://kb-1",
        source_version="v2",
        data=b"Orders ship within five days.",
        media_type="text/plain",
        acl=["group:support"],
        actor="t",
        wait=True,
    )
    document_delete(tenant=tenant, document_id="kb-2", actor="t")
    assert memory_sources_sweep() == 2
    assert _reason(shipping) == "source_document_changed: document kb-1 is now version v2, not v1"
    assert _reason(returns) == "source_document_deleted: document kb-2 was deleted"


def test_a_run_that_retention_deleted_changes_nothing(tenant):
    run = _conversation(tenant, "cust-6")
    seq = _say(tenant, run, "m-1", "I prefer mornings.")
    _keep(tenant, "cust-6", "preference", "time", "mornings", run_id=run.run_id, seq=seq)
    _keep(tenant, "cust-6", "preference", "other", "x", run_id="not-a-run-id", seq=3)
    from runs.operator.retention import runs_purge

    run_cancel(run_id=run.run_id, actor="t")
    runs_purge(older_than_days=0, statuses=["cancelled"], tenant_id=tenant.tenant_id)
    assert not AgentRun.objects.filter(run_id=run.run_id).exists()
    assert memory_sources_sweep() == 0 and set(_current(tenant, "cust-6")) == {
        "preference/time",
        "preference/other",
    }
