"""agent_events partitioned by month of its run's creation: partitions made ahead, an event of a month
with no partition kept in the default one and moved into its own when that is made, retention that
drops a month only when all its runs ended before the cutoff, and fork, export, import and erasure
over partitions."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import call_command
from django.db import connection
from django.utils import timezone

from config.embedded import APP_ROLE
from erasure.services import erasure_execute, erasure_request_create
from runs.conversations.messages import conversation_append
from runs.engine.forks import run_fork
from runs.engine.runs import run_cancel, run_start
from runs.kernel import apply
from runs.kernel import moves as m
from runs.kernel.models import AgentEvent, AgentRun
from runs.operator.history import history_digest, history_import, run_history_document
from runs.operator.partitions import partitions_maintain, partitions_of, partitions_retention
from workers.schedule import beat_schedule

pytestmark = pytest.mark.django_db


def _where(run_id) -> set[str]:
    """The partitions that hold the run's events (read as the owner would: tableoid names them)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT DISTINCT tableoid::regclass::text FROM agent_events WHERE run_id = %s", [run_id]
        )
        return {row[0] for row in cursor.fetchall()}


def _chat(tenant, subject: str = "cust-p") -> AgentRun:
    run = run_start(tenant=tenant, workflow_name="conversation", input={}, actor="t", subject=subject).run
    for cmid in ("m-1", "m-2"):
        conversation_append(
            tenant=tenant,
            run_id=run.run_id,
            event_type="user_message",
            client_message_id=cmid,
            body={"content": f"Message {cmid} from {subject} about order ord-9."},
            actor=f"user:{subject}",
        )
    return AgentRun.objects.get(run_id=run.run_id)


def _import_as_of(tenant, run: AgentRun, when: datetime, *, status: str = "cancelled") -> AgentRun:
    """A copy of `run` made, updated and (for a finished status) ended at `when`: an old month's run."""
    document = run_history_document(run_id=run.run_id)
    document["run"].update(created_at=when.isoformat(), updated_at=when.isoformat(), status=status)
    document["digest"] = history_digest(document)
    imported = history_import(document=json.loads(json.dumps(document)), tenant_slug=tenant.slug)
    return AgentRun.objects.get(run_id=imported.run_id)


def test_partitions_are_made_ahead_and_the_application_reaches_them_only_through_the_table(tenant):
    names = [p.name for p in partitions_of("agent_events")]
    now = timezone.now()
    months = [f"agent_events_p{(now.replace(day=15) + timedelta(days=31 * k)):%Y%m}" for k in range(3)]
    assert set(months) <= set(names) and names[-1] == "agent_events_default"
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT partstrat FROM pg_partitioned_table WHERE partrelid = 'agent_events'::regclass"
        )
        assert cursor.fetchone() == ("r",)
        for name in (months[0], "agent_events_default"):
            cursor.execute("SELECT has_table_privilege(%s, %s, 'SELECT')", [APP_ROLE, name])
            assert cursor.fetchone() == (False,)  # row-level security is on agent_events, not on its parts
    run = _chat(tenant)
    assert _where(run.run_id) == {f"agent_events_p{run.created_at.astimezone(UTC):%Y%m}"}
    assert set(AgentEvent.objects.filter(run=run).values_list("run_created_at", flat=True)) == {
        run.created_at
    }


def test_an_event_of_a_month_without_a_partition_waits_in_the_default_one_and_moves_when_it_is_made(tenant):
    old = datetime(2019, 3, 14, 12, tzinfo=UTC)
    copy = _import_as_of(tenant, _chat(tenant), old)
    assert _where(copy.run_id) == {"agent_events_default"}
    events = AgentEvent.objects.filter(run=copy).count()
    report = partitions_maintain()
    assert report.made[0] == "agent_events_p201903" and report.moved_from_default == events
    assert _where(copy.run_id) == {"agent_events_p201903"}
    assert AgentEvent.objects.filter(run=copy).count() == events  # nothing lost on the way
    # the months between it and now are made too: nothing of later months waits in the default one
    assert "agent_events_p201904" in {p.name for p in partitions_of("agent_events")}


def test_retention_drops_a_month_whose_runs_all_ended_and_keeps_one_with_a_live_run(tenant, settings):
    assert any(e["task"] == "workers.tasks.maintain_partitions" for e in beat_schedule().values())
    source = _chat(tenant)
    ended = _import_as_of(tenant, source, datetime(2019, 5, 3, tzinfo=UTC))
    waiting = _import_as_of(tenant, source, datetime(2019, 6, 3, tzinfo=UTC), status="running")
    settings.KEEPER_EVENTS_RETENTION_DAYS = 0  # the default keeps every month
    assert partitions_maintain().dropped == []
    assert AgentEvent.objects.filter(run=ended).exists()
    settings.KEEPER_EVENTS_RETENTION_DAYS = 365
    preview = partitions_retention(tables=["agent_events"], dry_run=True)
    assert "agent_events_p201905" in preview.dropped and AgentEvent.objects.filter(run=ended).exists()
    report = partitions_maintain()
    assert "agent_events_p201905" in report.dropped
    assert report.kept.get("agent_events_p201906") == 1  # the running run's month stays
    assert not AgentEvent.objects.filter(run=ended).exists()
    assert AgentRun.objects.filter(run_id=ended.run_id).exists()  # its row stays until `purge`
    assert AgentEvent.objects.filter(run=waiting).count() == waiting.state_revision
    assert AgentEvent.objects.filter(run=source).count() == source.state_revision  # this month: not due


def test_a_month_with_a_running_run_is_never_dropped_even_past_its_cutoff(tenant):
    live = _chat(tenant)
    month = f"agent_events_p{live.created_at.astimezone(UTC):%Y%m}"
    future = timezone.now() + timedelta(days=70)
    assert apply(m.PartitionDropped("agent_events", month, future)) == ("kept", 1)
    run_cancel(run_id=live.run_id, actor="user:eng", note="done")
    assert apply(m.PartitionDropped("agent_events", month, future, dry_run=True)) == ("would_drop", 0)
    assert apply(m.PartitionDropped("agent_events", "agent_events_default", future))[0] == "not_a_partition"
    assert apply(m.PartitionDropped("agent_events", month, timezone.now()))[0] == "not_past_cutoff"
    assert AgentEvent.objects.filter(run=live).count() == live.state_revision + 1


def test_fork_export_and_erasure_read_and_write_across_partitions(tenant):
    copy = _import_as_of(tenant, _chat(tenant, subject="cust-old"), datetime(2019, 8, 9, tzinfo=UTC))
    partitions_maintain()
    assert _where(copy.run_id) == {"agent_events_p201908"}
    fork = run_fork(run_id=copy.run_id, at_seq=copy.state_revision, actor="user:eng", start=False)
    assert _where(fork.run_id) == {f"agent_events_p{fork.created_at.astimezone(UTC):%Y%m}"}
    copied = AgentEvent.objects.filter(run=fork, event_type="user_message").order_by("seq")
    assert [e.payload["forked_from"]["run_id"] for e in copied] == [str(copy.run_id)] * 2
    document = run_history_document(run_id=copy.run_id)
    assert [e["seq"] for e in document["events"]] == list(range(1, copy.state_revision + 1))
    assert "run_created_at" not in document["events"][0]
    request = erasure_request_create(tenant=tenant, subject_id="cust-old", requested_by="user:compliance")
    done = erasure_execute(tenant_id=tenant.tenant_id, request_id=request.request_id)
    assert done.status == "completed", done.receipt
    for run in (copy, fork):
        texts = AgentEvent.objects.filter(run=run, event_type="user_message").values_list(
            "payload", flat=True
        )
        assert texts and not any("cust-old" in json.dumps(t) for t in texts)


def test_the_command_shows_each_step_and_the_partitions_left(tenant, capsys):
    _import_as_of(tenant, _chat(tenant), datetime(2019, 10, 1, tzinfo=UTC))
    call_command("events_partitions", "--retention-days", "30", "--json")
    out, err = capsys.readouterr()
    report = json.loads(out)
    assert "made agent_events_p201910" in err and "agent_events_p201910 (~" in err
    assert "agent_events_p201910" in report["dropped"]
    assert "agent_events_p201910" not in {p["name"] for p in report["partitions"]}
