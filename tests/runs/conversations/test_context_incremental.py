"""A turn's context reads the events after the last summary, not the whole log: its cost follows the tail."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from bench.runs import conversation_run_bulk
from runs.conversations.compaction.tokens import token_counter
from runs.conversations.context import context_build
from runs.kernel.models import AgentEvent, AgentRun, Summary

pytestmark = pytest.mark.django_db


def _run(tenant: Any, n: int) -> AgentRun:
    texts = [
        f"Message {i}: where is my parcel for order ord-{i % 97}? It was due on Monday." for i in range(n)
    ]
    texts[4] = "Refund 25.00 EUR for order ord-5, and never call me by phone."  # a user message
    return conversation_run_bulk(tenant_slug=tenant.slug, texts=texts)


def _rows_read(table: str) -> int:
    """Rows this transaction has read from `table` so far (sequential reads and index fetches), in its
    partitions if it has them (agent_events: the reads are counted where the rows are)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT coalesce(sum(coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0)), 0)"
            " FROM pg_stat_xact_user_tables WHERE relname = %s"
            " OR relid IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = %s::regclass)",
            [table, table],
        )
        return int(cursor.fetchone()[0])


def _second_turn(run: AgentRun) -> tuple[int, int, Any]:
    counter = token_counter("gpt-4")
    context_build(run=run, counter=counter)  # the first build compacts the history
    assert Summary.objects.filter(run=run).exists()
    before = _rows_read("agent_events")
    with CaptureQueriesContext(connection) as queries:
        built = context_build(run=run, counter=counter)
    return _rows_read("agent_events") - before, len(queries), built


def test_after_compaction_a_turn_reads_the_tail_not_the_log(tenant):
    small_rows, small_queries, small = _second_turn(_run(tenant, 1000))
    large_rows, large_queries, large = _second_turn(_run(tenant, 10_000))
    # 10x the log, the same work: the events after the last summary and nothing of the summarized past.
    assert large.events_read == small.events_read <= 20
    assert large_rows <= small_rows + 5 and large_rows <= 50, (small_rows, large_rows)
    assert large_queries == small_queries, (small_queries, large_queries)
    assert large.raw_from_seq is not None and large.raw_from_seq > 9_900
    carry = next(m["content"] for m in large.messages if m["content"].startswith("[structured carry"))
    assert "2500" in carry and "never call me by phone" in carry  # what was summarized still carries


def test_a_rewritten_event_makes_only_its_summary_read_again(tenant):
    run = _run(tenant, 1000)
    counter = token_counter("gpt-4")
    context_build(run=run, counter=counter)
    chain = list(Summary.objects.filter(run=run, status="valid").order_by("covers_from_seq"))
    second = chain[1]
    victim = AgentEvent.objects.get(run=run, seq=second.covers_from_seq + 1)
    AgentEvent.objects.filter(pk=victim.pk).update(payload={**victim.payload, "content": "changed later"})
    assert AgentEvent.objects.get(pk=victim.pk).rewrites == 1  # counted by the trigger
    before = _rows_read("agent_events")
    built = context_build(run=run, counter=counter)
    read = _rows_read("agent_events") - before
    size = second.covers_to_seq - second.covers_from_seq + 1
    assert any("digest mismatch" in note for note in built.notes)
    assert Summary.objects.get(pk=second.pk).status == "stale"
    assert size <= read <= size + 50  # that range and the tail, not the other summaries' ranges
    # Checked again, the rebuilt summary is trusted on the next turn without reading its range.
    before = _rows_read("agent_events")
    again = context_build(run=run, counter=counter)
    assert _rows_read("agent_events") - before <= 50 and not any("rebuilt" in n for n in again.notes)


def test_an_update_cannot_lower_the_rewrite_count(tenant):
    run = _run(tenant, 20)
    event = AgentEvent.objects.get(run=run, seq=3)
    AgentEvent.objects.filter(pk=event.pk).update(payload={**event.payload, "content": "x"})
    AgentEvent.objects.filter(pk=event.pk).update(rewrites=0, actor="someone")
    assert AgentEvent.objects.get(pk=event.pk).rewrites == 1
    AgentEvent.objects.filter(pk=event.pk).update(actor="someone else")  # not the content: not a rewrite
    assert AgentEvent.objects.get(pk=event.pk).rewrites == 1


def test_an_imported_summary_is_checked_on_first_use(tenant):
    run = _run(tenant, 1000)
    counter = token_counter("gpt-4")
    context_build(run=run, counter=counter)
    first = Summary.objects.filter(run=run, status="valid").order_by("covers_from_seq").first()
    # As an import leaves it: never checked here, and its text does not match its events.
    Summary.objects.filter(pk=first.pk).update(rewrites_checked=-1, source_digest="sha256:forged")
    built = context_build(run=run, counter=counter)
    assert any("digest mismatch" in note for note in built.notes)
    assert Summary.objects.get(pk=first.pk).status == "stale"


def _answered_run(tenant: Any, turns: int) -> AgentRun:
    """A conversation of `turns` answered questions and one more question, as the respond step leaves it."""
    from django.utils import timezone

    run = conversation_run_bulk(tenant_slug=tenant.slug, texts=[])
    digest = AgentEvent.objects.get(run=run, seq=1).state_digest
    rows = []
    for i in range(2 * turns + 1):
        seq = i + 2
        reply = i % 2 == 1
        payload: dict[str, Any] = {"content": f"text {i}", "client_message_id": f"m-{i}"}
        if reply:
            payload["in_reply_to"] = seq - 1
        rows.append(
            AgentEvent(
                run=run,
                tenant_id=tenant.tenant_id,
                seq=seq,
                event_type="assistant_message" if reply else "user_message",
                payload=payload,
                actor="test",
                state_revision=seq,
                state_digest=digest,
                client_message_id=f"m-{i}",
                created_at=timezone.now(),
                run_created_at=run.created_at,
            )
        )
    AgentEvent.objects.bulk_create(rows, batch_size=2000)
    AgentRun.objects.filter(pk=run.pk).update(state_revision=rows[-1].seq)
    return run


def test_finding_the_message_to_answer_reads_the_newest_replies_not_the_log(tenant):
    from runs.conversations.messages import conversation_next_unanswered

    read = {}
    for turns in (500, 5000):
        run = _answered_run(tenant, turns)
        before = _rows_read("agent_events")
        message = conversation_next_unanswered(run_id=run.run_id)
        read[turns] = _rows_read("agent_events") - before
        assert message is not None and message.seq == 2 * turns + 2  # the last question, unanswered
    assert read[5000] <= read[500] + 5 and read[5000] <= 200, read


def test_a_tool_call_answered_in_a_later_summarized_range_is_not_carried_as_unconfirmed(tenant):
    from django.utils import timezone

    texts = [
        f"Message {i}: where is my parcel for order ord-{i % 97}? It was due on Monday." for i in range(1200)
    ]
    run = conversation_run_bulk(tenant_slug=tenant.slug, texts=texts)

    # Turn two messages into a call and its result 600 events apart, and one call that never gets one.
    def tool(seq: int, kind: str, call_id: str) -> None:
        payload: dict[str, Any] = {"client_message_id": f"m-{seq - 2}", "call_id": call_id, "tool": "lookup"}
        if kind == "tool_call":
            payload["arguments"] = {"order": "ord-1"}
        else:
            payload.update(preview="delivered", content_ref=None, truncated=False, is_error=False)
        AgentEvent.objects.filter(run=run, seq=seq).delete()
        AgentEvent.objects.create(
            run=run,
            tenant_id=tenant.tenant_id,
            run_created_at=run.created_at,
            seq=seq,
            event_type=kind,
            payload=payload,
            actor="t",
            state_revision=seq,
            state_digest="d",
            client_message_id=f"m-{seq - 2}",
            created_at=timezone.now(),
        )

    tool(20, "tool_call", "c-answered")
    tool(620, "tool_result", "c-answered")
    tool(30, "tool_call", "c-open")
    counter = token_counter("gpt-4")
    context_build(run=run, counter=counter)
    chain = list(Summary.objects.filter(run=run, status="valid").order_by("covers_from_seq"))
    assert chain[0].covers_to_seq < 620 <= chain[-1].covers_to_seq  # call and result in different summaries
    built = context_build(run=run, counter=counter)
    carry = next(m["content"] for m in built.messages if m["content"].startswith("[structured carry"))
    assert "c-open" in carry and "c-answered" not in carry
