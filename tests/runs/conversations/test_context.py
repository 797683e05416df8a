"""The context builder: within budget, compaction with provenance, tampering detected, carry kept."""

from __future__ import annotations

import pytest
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.runs import conversation_run_bulk
from core.digests import canonical_json
from runs.conversations.compaction.tokens import token_counter
from runs.conversations.context import ContextTooLarge, context_build
from runs.kernel.models import AgentEvent, AgentRun, Summary, ToolOperation

pytestmark = pytest.mark.django_db


def _conversation(tenant, texts: list[str]) -> AgentRun:
    return conversation_run_bulk(tenant_slug=tenant.slug, texts=texts)


def _texts(n: int) -> list[str]:
    texts = [
        f"Message {i}: the shipment for order ord-{i % 37} is still on its way, please check."
        for i in range(n)
    ]
    texts[10] = "I need a refund of 25.00 EUR for order ord-1. Never contact me by phone."
    texts[11] = "Noted, operation refund:ord-1 will be used."
    return texts


def test_a_5000_event_conversation_compacts_into_continuous_verified_summaries(tenant):
    run = _conversation(tenant, _texts(5000))
    counter = token_counter("gpt-3.5-turbo")
    built = context_build(run=run, counter=counter, system_prompt="You are a support agent.")
    assert built.total <= built.budget and built.total == sum(built.parts.values())
    chain = list(Summary.objects.filter(run=run, status="valid").order_by("covers_from_seq"))
    assert chain and chain[0].covers_from_seq == 1
    for before, after in zip(chain, chain[1:], strict=False):
        assert after.covers_from_seq == before.covers_to_seq + 1  # continuous
    assert built.raw_from_seq == chain[-1].covers_to_seq + 1 or built.raw_from_seq > chain[-1].covers_to_seq
    carry = next(m["content"] for m in built.messages if m["content"].startswith("[structured carry"))
    assert "2500" in carry and "refund:ord-1" in carry and "Never contact me by phone" in carry
    # A second build reuses the summaries: nothing is compacted again.
    again = context_build(run=run, counter=counter, system_prompt="You are a support agent.")
    assert Summary.objects.filter(run=run).count() == len(chain) and again.total == built.total


def test_tampering_with_a_summarized_raw_event_is_detected_and_the_summary_rebuilt(tenant):
    run = _conversation(tenant, _texts(600))
    counter = token_counter("gpt-4")
    context_build(run=run, counter=counter)
    summary = Summary.objects.filter(run=run, status="valid").order_by("covers_from_seq").first()
    victim = AgentEvent.objects.get(run=run, seq=summary.covers_from_seq + 1)
    AgentEvent.objects.filter(pk=victim.pk).update(payload={**victim.payload, "content": "tampered"})
    built = context_build(run=run, counter=counter)
    assert any("digest mismatch" in note for note in built.notes)
    assert Summary.objects.get(pk=summary.pk).status == "stale"
    assert Summary.objects.filter(run=run, status="valid", covers_from_seq=summary.covers_from_seq).exists()


def test_deleting_a_detail_from_a_summary_changes_no_durable_state(tenant):
    run = _conversation(tenant, _texts(600))
    now = timezone.now()
    ToolOperation.objects.create(
        operation_id="refund:ord-1",
        tenant=tenant,
        run=run,
        step_id="refund",
        tool_name="payments.refund",
        tool_contract_version="payments.v1",
        request_digest="sha256:r",
        status="succeeded",
        external_ref="rf_1",
        created_at=now,
        updated_at=now,
    )
    state_before, op_before = canonical_json(run.state), ToolOperation.objects.values().get()
    counter = token_counter("gpt-4")
    context_build(run=run, counter=counter)
    summary = Summary.objects.filter(run=run, carry__money__isnull=False).order_by("covers_from_seq").first()
    Summary.objects.filter(pk=summary.pk).update(
        text=summary.text.replace("25.00 EUR", "").replace("2500", ""),
        facts=[f for f in summary.facts if "25.00" not in f["text"]],
    )
    run.refresh_from_db()
    assert canonical_json(run.state) == state_before and ToolOperation.objects.values().get() == op_before
    built = context_build(run=run, counter=counter)
    carry = next(m["content"] for m in built.messages if m["content"].startswith("[structured carry"))
    assert "2500" in carry and "refund:ord-1" in carry  # the amount and the op id live structurally


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(
        st.text(
            st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"), min_size=1, max_size=400
        ),
        min_size=1,
        max_size=120,
    )
)
def test_the_built_context_never_exceeds_the_budget(tenant, texts):
    run = _conversation(tenant, [t if t.strip() else "x" for t in texts])
    try:
        built = context_build(run=run, counter=token_counter("gpt-4"), system_prompt="s" * 50)
    except ContextTooLarge:
        return  # refusing is allowed; going over the budget silently is not
    assert built.total <= built.budget
    assert built.total == sum(built.parts.values())


def test_a_new_compactor_version_rebuilds_summaries_from_raw_events(tenant):
    from dataclasses import replace

    from runs.conversations.compaction.compactors import ExtractiveCompactor

    run = _conversation(tenant, _texts(600))
    counter = token_counter("gpt-4")
    context_build(run=run, counter=counter)
    old = set(Summary.objects.filter(run=run, status="valid").values_list("pk", flat=True))

    class NextVersion(ExtractiveCompactor):
        info = replace(ExtractiveCompactor.info, prompt_version="extractive-v2")

    built = context_build(run=run, counter=counter, compactor=NextVersion())
    assert any("compactor" in note and "rebuilt" in note for note in built.notes)
    assert Summary.objects.filter(pk__in=old, status="stale").count() == len(old)
    fresh = Summary.objects.filter(run=run, status="valid")
    assert fresh.exists() and all(s.compactor["prompt_version"] == "extractive-v2" for s in fresh)
