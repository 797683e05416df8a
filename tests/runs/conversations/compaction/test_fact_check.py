"""When a model's summary and the log disagree, the log wins: unsupported facts are dropped and counted."""

from __future__ import annotations

import json

import pytest
from prometheus_client import REGISTRY

from bench.runs import conversation_run_bulk
from runs.conversations.compaction.compactors import ModelCompactor
from runs.conversations.compaction.services import facts_check, summary_create
from runs.conversations.compaction.tokens import token_counter
from runs.kernel.models import AgentEvent

TEXTS = [
    "I need a refund of 25.00 EUR for order ord-17, my e-mail is ann@example.com.",
    "I will refund 25.00 EUR for ord-17 today.",
    'Please send the label to "12 Baker Street".',
    "Done, the label goes to 12 Baker Street.",
]


def _unsupported() -> float:
    return (
        REGISTRY.get_sample_value("keeper_summary_facts_unsupported_total", {"compactor": "compact-v2"})
        or 0.0
    )


@pytest.mark.django_db
def test_a_model_fact_whose_values_are_not_in_its_cited_events_is_dropped_and_counted(tenant, chat):
    run = conversation_run_bulk(tenant_slug=tenant.slug, texts=TEXTS)  # the messages are seqs 2..5
    facts = [
        {"text": "customer asked for a refund of 25.00 EUR for ord-17", "source_seq": [2, 2]},
        {"text": "customer asked for a refund of 250.00 EUR for ord-17", "source_seq": [2, 2]},  # amount
        {"text": "the refund is for ord-71", "source_seq": [2, 3]},  # id
        {"text": 'the label goes to "12 Baker Street"', "source_seq": [4, 5]},
        {"text": 'the label goes to "21 Baker Street"', "source_seq": [4, 5]},  # quoted text
        {"text": "refund confirmed: 25 EUR", "source_seq": [3, 3]},  # 25 is 25.00: the same number
        {"text": "customer wrote from ann@example.com", "source_seq": [4, 4]},  # cites the wrong event
    ]
    chat.answer(json.dumps({"facts": facts, "open_questions": [], "decisions": []}))
    events = list(AgentEvent.objects.filter(run=run, seq__gte=2).order_by("seq"))
    before = _unsupported()
    summary = summary_create(
        run=run, events=events, counter=token_counter("gpt-4"), compactor=ModelCompactor(chat.url, "m")
    )
    kept = [f["text"] for f in summary.facts]
    assert kept == [facts[0]["text"], facts[3]["text"], facts[5]["text"]]
    dropped = {f["text"]: f["why"] for f in summary.unsupported_facts}
    assert set(dropped) == {facts[i]["text"] for i in (1, 2, 4, 6)}
    assert "250.00" in dropped[facts[1]["text"]] and "ord-71" in dropped[facts[2]["text"]]
    assert "ann@example.com" in dropped[facts[6]["text"]]
    assert "250.00" not in summary.text and "ord-71" not in summary.text and "21 Baker" not in summary.text
    assert "25.00 EUR for ord-17" in summary.text
    assert summary.token_count == token_counter("gpt-4").count(summary.text)
    assert _unsupported() - before == 4
    # The model was told that the events win.
    system = chat.requests[0]["body"]["messages"][0]["content"]
    assert "raw events win" in system and "dropped" in system


def test_a_fact_citing_events_outside_the_range_is_unsupported():
    events = [{"seq": 3, "event_type": "user_message", "payload": {"content": "order ord-1"}}]
    kept, dropped = facts_check(
        [{"text": "order ord-1", "source_seq": [3, 3]}, {"text": "order ord-1", "source_seq": [2, 3]}], events
    )
    assert kept == [{"text": "order ord-1", "source_seq": [3, 3]}]
    assert "outside" in dropped[0]["why"]


@pytest.mark.django_db
def test_the_extractive_compactor_s_facts_all_hold(tenant):
    run = conversation_run_bulk(tenant_slug=tenant.slug, texts=TEXTS * 10)
    events = list(AgentEvent.objects.filter(run=run).order_by("seq"))
    summary = summary_create(run=run, events=events, counter=token_counter("gpt-4"))
    assert summary.facts and summary.unsupported_facts == []
