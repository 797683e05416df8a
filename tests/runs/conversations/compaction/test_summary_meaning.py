"""A summary's fact keeps the meaning of the events it cites: a flipped negation, a dropped condition
or a currency changed or lost holds the summary for review; the extractive compactor's summary of
the same events stands in for it (and is not rebuilt for its other compactor) until a person
releases the held one."""

from __future__ import annotations

import json

import pytest

from bench.runs import conversation_run_bulk
from runs.conversations.compaction.compactors import ModelCompactor
from runs.conversations.compaction.meaning import facts_meaning_check
from runs.conversations.compaction.services import (
    summaries_usable,
    summary_compact,
    summary_create,
    summary_held_release,
)
from runs.conversations.compaction.tokens import token_counter
from runs.kernel.models import AgentEvent, Summary

TEXTS = [
    "I do not want a refund, I want to keep the item.",
    "Refund 25.00 EUR only if the parcel is lost.",
    "The order was 40.00 EUR.",
    "Please never call me, email only.",
]
FACTS = [
    {"text": "customer wants a refund", "source_seq": [2, 2]},  # the event says not
    {"text": "customer wants to keep the item", "source_seq": [2, 2]},
    {"text": "refund 25.00 EUR agreed", "source_seq": [3, 3]},  # the event says: only if lost
    {"text": "the order was 40.00 USD", "source_seq": [4, 4]},  # another currency
    {"text": "the order was 40", "source_seq": [4, 4]},  # no currency
    {"text": "customer does not want phone calls", "source_seq": [5, 5]},
]


def _events(run, first=1):
    return list(AgentEvent.objects.filter(run=run, seq__gte=first).order_by("seq"))


@pytest.mark.django_db
def test_a_summary_that_changes_the_meaning_of_its_events_is_held_and_the_extractive_one_stands_in(
    tenant, chat
):
    run = conversation_run_bulk(tenant_slug=tenant.slug, texts=TEXTS)  # the messages are seqs 2..5
    chat.answer(json.dumps({"facts": FACTS, "open_questions": [], "decisions": []}))
    model, counter = ModelCompactor(chat.url, "m"), token_counter("gpt-4")
    used = summary_compact(run=run, events=_events(run), counter=counter, compactor=model)
    held = Summary.objects.get(run=run, status="held")
    why = {f["text"]: f["why"] for f in held.unsupported_facts}
    assert set(why) == {FACTS[i]["text"] for i in (0, 2, 3, 4)}
    assert why[FACTS[0]["text"]].startswith("meaning: polarity")
    assert why[FACTS[2]["text"]].startswith("meaning: condition")
    assert "40.00 USD" in why[FACTS[3]["text"]] and "lost its currency" in why[FACTS[4]["text"]]
    assert all(f["held"] for f in held.unsupported_facts)
    assert used.status == "valid" and used.compactor["prompt_version"] == "extractive-v1"
    assert "I do not want a refund" in used.text and "wants a refund" not in used.text
    # The stand-in is used with the model compactor configured: not rebuilt, the model not asked again.
    asked = len(chat.requests)
    chain, notes = summaries_usable(run=run, counter=counter, compactor=model)
    assert [s.summary_id for s in chain] == [used.summary_id] and notes == []
    assert len(chat.requests) == asked
    # A person read it and releases it: the held summary is used, the stand-in is stale.
    summary_held_release(run=run, summary_id=held.summary_id)
    chain, _ = summaries_usable(run=run, counter=counter, compactor=model)
    assert [s.summary_id for s in chain] == [held.summary_id]
    assert Summary.objects.get(summary_id=used.summary_id).status == "stale"


@pytest.mark.django_db
def test_a_summary_whose_facts_keep_their_meaning_is_used_as_written(tenant, chat):
    run = conversation_run_bulk(tenant_slug=tenant.slug, texts=TEXTS)
    kept = [FACTS[1], FACTS[5], {"text": "refund 25.00 EUR if the parcel is lost", "source_seq": [3, 3]}]
    chat.answer(json.dumps({"facts": kept, "open_questions": [], "decisions": []}))
    summary = summary_create(
        run=run, events=_events(run), counter=token_counter("gpt-4"), compactor=ModelCompactor(chat.url, "m")
    )
    assert summary.status == "valid" and summary.facts == kept and summary.unsupported_facts == []


@pytest.mark.parametrize(
    ("said", "fact", "problem"),
    [
        ("Я не хочу возврат денег.", "клиент хочет возврат", "polarity"),
        ("Я не хочу возврат денег.", "клиент не хочет возврат денег", None),
        ("我不想要退款。", "客户想要退款", "polarity"),
        ("Верните 500 руб, если посылка потеряна.", "вернуть 500 руб", "condition"),
        ("如果包裹丢了，请退款100元。", "请退款100元", "condition"),
        ("Refund 30.00 EUR please.", "refund 30.00 EUR", None),
        ("Refund 30.00 EUR please.", "refund 30.00 GBP", "amount"),
        ("My parcel ord-25 arrived, refund 25 EUR.", "parcel ord-25 arrived", None),
        ("Never call me by phone.", "customer wants phone calls", "polarity"),
        ("Don't call, email only.", "user: Don't call, email only", None),
    ],
)
def test_polarity_conditions_and_currencies_in_english_russian_and_chinese(said, fact, problem):
    events = [{"seq": 1, "event_type": "user_message", "payload": {"content": said}}]
    kept, changed = facts_meaning_check([{"text": fact, "source_seq": [1, 1]}], events)
    if problem is None:
        assert kept and not changed
    else:
        assert changed and changed[0]["why"].startswith(f"meaning: {problem}"), changed
