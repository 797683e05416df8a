"""A session starts from the subject's MEMORY.md, as the tutorial loads it: by default, and in the
support agent's own turns; later turns search memory for the message."""

from __future__ import annotations

import pytest

from memory.services import memory_remember
from runs.conversations.context import DEFAULT_BUDGET, context_build
from runs.conversations.messages import conversation_append
from runs.engine.runs import run_start
from runs.workflows.support_agent import SUPPORT_BUDGET
from tests.memory.test_memory import said

pytestmark = pytest.mark.django_db


def _memory(built):
    return [m["content"] for m in built.messages if m["content"].startswith("[memory")]


def test_a_support_agent_s_first_turn_loads_the_subject_s_memory_md(tenant):
    for key, value in (("language", "answer in German"), ("timezone", "Europe/Lisbon")):
        memory_remember(
            tenant=tenant,
            subject_id="cust-5",
            namespace="preference",
            key=key,
            value=value,
            provenance=said(),
            consent_basis="explicit",
        )
    memory_remember(
        tenant=tenant,
        subject_id="cust-5",
        namespace="profile",
        key="city",
        value="Lisbon",
        provenance=said(),
        consent_basis="contract",
    )
    assert DEFAULT_BUDGET.memory_file and SUPPORT_BUDGET.memory_file
    run = run_start(tenant=tenant, workflow_name="support_agent", input={}, actor="t", subject="cust-5").run
    conversation_append(
        tenant=tenant,
        run_id=run.run_id,
        event_type="user_message",
        client_message_id="u1",
        body={"content": "Where is my parcel?"},
        actor="user:cust-5",
    )
    first = _memory(context_build(run=run, query="Where is my parcel?", budget=SUPPORT_BUDGET))
    assert all(" MEMORY.md - " in line for line in first), first
    assert any('preference/timezone: "Europe/Lisbon"' in line for line in first)
    assert any('profile/city: "Lisbon"' in line for line in first)  # the whole file, not a search's hits
    conversation_append(
        tenant=tenant,
        run_id=run.run_id,
        event_type="assistant_message",
        client_message_id="a1",
        body={"content": "Let me look."},
        actor="worker",
    )
    later = _memory(context_build(run=run, query="Where is my parcel?", budget=SUPPORT_BUDGET))
    assert later and not any("MEMORY.md" in line for line in later)
