"""webhook_deliveries and console_audit_log partitioned by month beside agent_events, from one registry
(runs/operator/partitions.py): rows land in their month, an unexpected one waits in the default
partition, months are made ahead, retention drops whole months (never one with a pending delivery,
nothing of the audit log unless it is set), and the lookups by id (a delivery's retry, the erasure
of an audit note or a delivery's data) reach rows in an old month."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import DatabaseError, connection, transaction
from django.utils import timezone

from config.embedded import APP_ROLE
from console.models import AuditEntry
from erasure.services import erasure_execute, erasure_request_create
from runs.engine.runs import run_start
from runs.kernel import apply
from runs.kernel import moves as m
from runs.operator.partitions import (
    PARTITIONED,
    partitions_maintain,
    partitions_make,
    partitions_of,
    partitions_retention,
)
from runs.webhooks.delivery import webhooks_deliver_due
from runs.webhooks.models import WebhookDelivery, WebhookSubscription
from runs.webhooks.services import webhook_deliveries_recent, webhook_subscription_create
from tests.runs.webhooks.receiver import Receiver
from workers.schedule import beat_schedule

pytestmark = pytest.mark.django_db


def _month(when: datetime, k: int = 0) -> str:
    return f"{(when.astimezone(UTC).replace(day=15) + timedelta(days=31 * k)):%Y%m}"


def _where(table: str, row_id: int) -> str:
    """The partition that holds the row (read as the owner would: tableoid names it)."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT tableoid::regclass::text FROM {table} WHERE id = %s", [row_id])  # noqa: S608
        return cursor.fetchone()[0]


def _subscription(
    tenant, url: str = "https://acme.example/h", types: tuple[str, ...] = ("run.completed", "run.failed")
) -> WebhookSubscription:
    return webhook_subscription_create(
        tenant=tenant, url=url, event_types=list(types), actor="test"
    ).subscription


def _delivery(
    tenant, subscription, when: datetime, *, status: str = "delivered", **fields
) -> WebhookDelivery:
    """A delivery of `when`'s month (the outbox writes now's; an old month's is made as it was then)."""
    return WebhookDelivery.objects.create(
        tenant=tenant,
        subscription=subscription,
        event_id=fields.pop("event_id", None) or uuid.uuid4(),
        event_type="run.failed",
        data=fields.pop("data", {"status": "failed", "reason": "unreachable_host"}),
        status=status,
        next_attempt_at=fields.pop("next_attempt_at", when),
        created_at=when,
        **fields,
    )


def _entry(
    tenant, when: datetime, *, note: str = "looked fine", target: tuple[str, str] = ("run", "x")
) -> int:
    """An audit entry of `when` (the log only takes inserts; the model stamps now, so SQL)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO console_audit_log (at, actor, tenant_id, action, target_type, target_id, note, details,"
            " remote_addr) VALUES (%s, 'user:ana', %s, 'approve', %s, %s, %s, '{}', '') RETURNING id",
            [when, tenant.tenant_id, *target, note],
        )
        return cursor.fetchone()[0]


def test_the_registry_and_the_database_agree_and_months_are_made_ahead_at_migrate():
    assert set(PARTITIONED) == {"agent_events", "webhook_deliveries", "console_audit_log"}
    now = timezone.now()
    with connection.cursor() as cursor:
        for spec in PARTITIONED.values():
            cursor.execute(
                """SELECT t.partstrat, a.attname FROM pg_partitioned_table t
                     JOIN pg_attribute a ON a.attrelid = t.partrelid AND a.attnum = t.partattrs[0]
                    WHERE t.partrelid = %s::regclass""",
                [spec.name],
            )
            assert cursor.fetchone() == ("r", spec.key), spec.name
            names = [p.name for p in partitions_of(spec.name)]
            ahead = {f"{spec.name}_p{_month(now, k)}" for k in range(4)}  # this month and 3 ahead
            assert ahead <= set(names) and names[-1] == spec.default_partition
            cursor.execute(
                "SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = %s::regclass AND contype = 'p'",
                [spec.name],
            )
            assert spec.key in cursor.fetchone()[0]  # the partition key is in the primary key
            for name in (f"{spec.name}_p{_month(now)}", spec.default_partition):
                cursor.execute("SELECT has_table_privilege(%s, %s, 'SELECT')", [APP_ROLE, name])
                assert cursor.fetchone() == (False,), name  # reached through the table, never directly
    assert any(e["task"] == "workers.tasks.maintain_partitions" for e in beat_schedule().values())


def test_rows_land_in_their_month_an_unexpected_one_in_the_default_until_its_month_is_made(tenant):
    subscription = _subscription(tenant)
    now = timezone.now()
    fresh = _delivery(tenant, subscription, now)
    entry = AuditEntry.objects.create(actor="user:ana", tenant=tenant, action="approve", note="ok")
    assert _where("webhook_deliveries", fresh.pk) == f"webhook_deliveries_p{_month(now)}"
    assert _where("console_audit_log", entry.pk) == f"console_audit_log_p{_month(now)}"

    old = datetime(2018, 1, 20, 9, tzinfo=UTC)
    stray = _delivery(tenant, subscription, old)
    stray_entry = _entry(tenant, old + timedelta(days=31))
    assert _where("webhook_deliveries", stray.pk) == "webhook_deliveries_default"
    assert _where("console_audit_log", stray_entry) == "console_audit_log_default"
    report = partitions_make(tables=["webhook_deliveries", "console_audit_log"])
    assert {"webhook_deliveries_p201801", "console_audit_log_p201802"} <= set(report.made)
    assert report.moved_from_default == 2
    assert _where("webhook_deliveries", stray.pk) == "webhook_deliveries_p201801"
    assert _where("console_audit_log", stray_entry) == "console_audit_log_p201802"  # moved, not deleted
    # the months between are made too, and the log still refuses a change or a deletion
    assert "console_audit_log_p201803" in {p.name for p in partitions_of("console_audit_log")}
    for change in (
        lambda: AuditEntry.objects.filter(pk=stray_entry).update(note="rewritten"),
        lambda: AuditEntry.objects.filter(pk=stray_entry).delete(),
    ):
        with pytest.raises(DatabaseError), transaction.atomic():
            change()


def test_the_months_ahead_follow_the_setting(settings):
    far = f"p{_month(timezone.now(), 5)}"
    assert not any(p.name.endswith(far) for t in PARTITIONED for p in partitions_of(t))
    settings.KEEPER_PARTITIONS_AHEAD = 5
    made = partitions_maintain().made
    assert {f"{t}_{far}" for t in PARTITIONED} <= set(made)


def test_webhook_retention_drops_old_months_and_keeps_one_with_a_pending_delivery(tenant, settings):
    subscription = _subscription(tenant)
    delivered = _delivery(tenant, subscription, datetime(2019, 1, 5, tzinfo=UTC))
    failed = _delivery(tenant, subscription, datetime(2019, 2, 5, tzinfo=UTC), status="failed")
    done = _delivery(tenant, subscription, datetime(2019, 3, 5, tzinfo=UTC))
    pending = _delivery(tenant, subscription, datetime(2019, 3, 9, tzinfo=UTC), status="pending")
    partitions_make(tables=["webhook_deliveries"])
    settings.KEEPER_WEBHOOK_DELIVERIES_RETENTION_DAYS = 0  # keeps every month
    assert not [n for n in partitions_maintain().dropped if n.startswith("webhook_deliveries")]
    assert WebhookDelivery.objects.filter(pk=delivered.pk).exists()

    settings.KEEPER_WEBHOOK_DELIVERIES_RETENTION_DAYS = 30
    preview = partitions_retention(tables=["webhook_deliveries"], dry_run=True)
    assert preview.dropped[:2] == ["webhook_deliveries_p201901", "webhook_deliveries_p201902"]
    assert "webhook_deliveries_p201903" not in preview.dropped
    assert WebhookDelivery.objects.filter(pk=delivered.pk).exists()
    report = partitions_maintain()
    assert {"webhook_deliveries_p201901", "webhook_deliveries_p201902"} <= set(report.dropped)
    assert report.kept["webhook_deliveries_p201903"] == 1  # the pending delivery keeps its month
    left = set(WebhookDelivery.objects.values_list("pk", flat=True))
    assert {delivered.pk, failed.pk} & left == set() and {done.pk, pending.pk} <= left


# The owner drops the month: what the application wrote must be committed, not held in its transaction.
@pytest.mark.django_db(transaction=True, databases=["default", "owner"])
def test_audit_retention_unset_keeps_every_month_and_set_drops_whole_old_ones(tenant, settings):
    old = _entry(tenant, datetime(2019, 4, 2, tzinfo=UTC))
    recent = AuditEntry.objects.create(actor="user:ana", tenant=tenant, action="approve")
    partitions_make(tables=["console_audit_log"])
    assert settings.KEEPER_AUDIT_RETENTION_DAYS == 0  # unset: kept forever
    partitions_maintain()
    assert AuditEntry.objects.filter(pk=old).exists()
    assert "console_audit_log_p201904" in {p.name for p in partitions_of("console_audit_log")}

    settings.KEEPER_AUDIT_RETENTION_DAYS = 365
    assert "console_audit_log_p201904" in partitions_maintain().dropped
    assert not AuditEntry.objects.filter(pk=old).exists()
    assert AuditEntry.objects.filter(pk=recent.pk).exists()  # this month is not past the cutoff


def test_a_delivery_of_an_old_month_is_retried_by_its_id_and_shown(tenant, settings):
    settings.KEEPER_WEBHOOKS_ALLOW_HTTP = settings.KEEPER_WEBHOOKS_ALLOW_PRIVATE = True
    settings.KEEPER_WEBHOOKS_BACKOFF = 0
    receiver = Receiver(fail_first=1).start()
    try:
        subscription = _subscription(tenant, receiver.url)
        when = datetime(2019, 5, 7, tzinfo=UTC)
        delivery = _delivery(tenant, subscription, when, status="pending", next_attempt_at=timezone.now())
        partitions_make(tables=["webhook_deliveries"])
        assert _where("webhook_deliveries", delivery.pk) == "webhook_deliveries_p201905"
        assert webhooks_deliver_due() == 1  # refused once (500), then retried and accepted
    finally:
        receiver.stop()
    delivery.refresh_from_db()
    assert delivery.status == "delivered" and delivery.attempts == 2
    assert [h["status_code"] for h in delivery.history] == [500, 200]
    assert len(receiver.requests) == 2 and receiver.accepted()[0].event["event_id"] == str(delivery.event_id)
    assert delivery.pk in {d.pk for d in webhook_deliveries_recent(limit=10)}  # the console's list


def test_an_erasure_finished_twice_the_same_way_is_announced_once(tenant):
    from runs.webhooks.services import webhook_erasure_finished

    _subscription(tenant, types=("erasure.finished",))
    request_id = uuid.uuid4()
    for clean in (False, False, True):
        webhook_erasure_finished(tenant_id=tenant.tenant_id, request_id=request_id, clean=clean)
    told = WebhookDelivery.objects.filter(event_type="erasure.finished")
    assert sorted(d.data["clean"] for d in told) == [False, True]


def test_erasure_reaches_an_audit_note_and_a_delivery_in_an_old_month(tenant):
    subject = "cust-old-7710"
    run = run_start(
        tenant=tenant, workflow_name="demo.countdown", input={"n": 3}, actor="test", subject=subject
    ).run
    when = datetime(2019, 6, 11, tzinfo=UTC)
    on_run = _entry(tenant, when, note="spoke to them at Elm Road 77", target=("run", str(run.run_id)))
    bystander = _entry(tenant, when, note="looked fine")
    delivery = _delivery(
        tenant, _subscription(tenant), when, data={"status": "failed", "reason": f"unreachable_{subject}"}
    )
    partitions_make(tables=["webhook_deliveries", "console_audit_log"])
    assert _where("console_audit_log", on_run) == "console_audit_log_p201906"
    request = erasure_request_create(tenant=tenant, subject_id=subject, requested_by="user:compliance")
    done = erasure_execute(tenant_id=tenant.tenant_id, request_id=request.request_id)
    assert done.status == "completed" and done.receipt["clean"], done.error
    erased = AuditEntry.objects.get(pk=on_run)
    assert erased.note == "[erased]" and erased.details["note_erased_by"] == str(request.request_id)
    assert AuditEntry.objects.get(pk=bystander).note == "looked fine"
    delivery.refresh_from_db()
    assert delivery.data["reason"] == "[erased]" and subject not in json.dumps(delivery.data)
    assert _where("console_audit_log", on_run) == "console_audit_log_p201906"  # the entry stays as evidence


def test_the_command_names_tables_and_refuses_one_retention_for_all(tenant, capsys):
    _delivery(tenant, _subscription(tenant), datetime(2019, 9, 3, tzinfo=UTC))
    call_command("partitions", "webhook_deliveries", "--retention-days", "30", "--json")
    out, err = capsys.readouterr()
    report = json.loads(out)
    assert "made webhook_deliveries_p201909" in err and "webhook_deliveries_p201909" in report["dropped"]
    assert {p["table"] for p in report["partitions"]} == {"webhook_deliveries"}
    with pytest.raises(CommandError, match="name the table"):
        call_command("partitions", "--retention-days", "1")
    with pytest.raises(CommandError, match="unknown_partitioned_table"):
        call_command("partitions", "agent_runs")
    call_command("events_partitions", "--json")  # the earlier name: agent_events alone
    assert {p["table"] for p in json.loads(capsys.readouterr()[0])["partitions"]} == {"agent_events"}


def test_the_application_role_cannot_drop_a_month_of_the_audit_log(tenant, settings):
    old = _entry(tenant, datetime(2019, 4, 2, tzinfo=UTC))
    partitions_make(tables=["console_audit_log"])
    # Called straight by the application's own connection, with a cutoff of its choosing.
    outcome, _ = apply(m.PartitionDropped("console_audit_log", "console_audit_log_p201904", timezone.now()))
    assert outcome == "owner_only"
    assert AuditEntry.objects.filter(pk=old).exists()
    # The retention skips the audit log, saying why, where the owner's connection is not configured.
    settings.KEEPER_AUDIT_RETENTION_DAYS = 365
    settings.DATABASES = {k: v for k, v in settings.DATABASES.items() if k != "owner"}
    report = partitions_maintain()
    assert "DATABASE_OWNER_URL" in report.skipped["console_audit_log"]
    assert AuditEntry.objects.filter(pk=old).exists()
