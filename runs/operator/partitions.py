"""The tables partitioned by month, in one place: partitions made ahead of time (the beat, every migrate,
`manage.py partitions`), and retention by whole partitions: a month goes once it ended before its
table's cutoff and nothing in it is still needed.

- agent_events, by its run's creation time: a run's events all live in the month it was created in, so
  a dropped month takes whole histories, never the start of a live one (the runs' rows stay until
  `purge`); a month with a run not ended before the cutoff is kept.
- webhook_deliveries, by creation time: delivered, failed and cancelled deliveries are records of what
  was sent; a month with a pending delivery (still to be sent, or retried) is kept.
- console_audit_log, by its time: kept forever unless an operator sets a retention (a compliance
  decision); nothing else keeps a month once it is past the cutoff.

The database functions (keeper_partitions_ensure, keeper_partition_drop) hold the same list of tables
and each one's rule; tests/runs/operator/test_partitioned_tables.py holds the two to each other.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, connections
from django.utils import timezone

from core.errors import InvalidInput
from runs.kernel import apply
from runs.kernel import moves as m
from runs.kernel.functions import partitions_ensure

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class PartitionedTable:
    name: str
    key: str  # the partition key: a timestamp column, monthly ranges
    retention_setting: str  # days past a month's end before it may go; 0 (or unset) keeps every month
    keeps: str  # what keeps a month past its cutoff, in words
    # Its months go only as the role that owns it (DATABASES["owner"], DATABASE_OWNER_URL): the audit log,
    # whose entries the application role can never delete.
    owner_only: bool = False

    @property
    def default_partition(self) -> str:
        return f"{self.name}_default"

    def retention_days(self) -> float:
        return float(getattr(settings, self.retention_setting) or 0)


PARTITIONED: dict[str, PartitionedTable] = {
    t.name: t
    for t in (
        PartitionedTable(
            "agent_events",
            "run_created_at",
            "KEEPER_EVENTS_RETENTION_DAYS",
            "a run created that month that is still active or ended after the cutoff",
        ),
        PartitionedTable(
            "webhook_deliveries",
            "created_at",
            "KEEPER_WEBHOOK_DELIVERIES_RETENTION_DAYS",
            "a delivery still pending (to be sent, or retried)",
        ),
        PartitionedTable(
            "console_audit_log",
            "at",
            "KEEPER_AUDIT_RETENTION_DAYS",
            "nothing: once past the cutoff the month goes",
            owner_only=True,
        ),
    )
}


@dataclass(frozen=True)
class Partition:
    table: str
    name: str
    range_from: datetime | None  # None: the default partition
    range_to: datetime | None
    approx_rows: int  # the planner's estimate: counting would read the whole month

    def as_json(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "name": self.name,
            "from": self.range_from.isoformat() if self.range_from else None,
            "to": self.range_to.isoformat() if self.range_to else None,
            "approx_rows": self.approx_rows,
        }


@dataclass
class PartitionsReport:
    dry_run: bool = False
    made: list[str] = field(default_factory=list)
    moved_from_default: int = 0
    dropped: list[str] = field(default_factory=list)
    # partition -> how many runs (agent_events) or pending deliveries (webhook_deliveries) keep it
    kept: dict[str, int] = field(default_factory=dict)
    # table -> rows (approximate) waiting in its default partition for a month of their own
    default_rows: dict[str, int] = field(default_factory=dict)
    # table -> why its retention did not run here
    skipped: dict[str, str] = field(default_factory=dict)

    def merge(self, other: PartitionsReport) -> PartitionsReport:
        self.made += other.made
        self.moved_from_default += other.moved_from_default
        self.dropped += other.dropped
        self.kept.update(other.kept)
        self.default_rows.update(other.default_rows)
        self.skipped.update(other.skipped)
        return self

    def as_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def partitioned_tables(names: Iterable[str] | None = None) -> list[PartitionedTable]:
    """The registered tables named (all of them for None); an unknown name is refused."""
    if names is None:
        return list(PARTITIONED.values())
    unknown = sorted(set(names) - set(PARTITIONED))
    if unknown:
        raise InvalidInput(
            f"not a partitioned table: {', '.join(unknown)} (one of {', '.join(PARTITIONED)})",
            code="unknown_partitioned_table",
        )
    return [PARTITIONED[name] for name in names]


def partitions_of(table: str) -> list[Partition]:
    """The table's partitions, oldest first, the default one last (the catalog only: no tenant's rows)."""
    spec = partitioned_tables([table])[0]
    with connection.cursor() as cursor:
        cursor.execute(
            """SELECT c.relname, greatest(c.reltuples, 0)::bigint FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
                WHERE i.inhparent = to_regclass(%s) ORDER BY c.relname""",
            [f"public.{spec.name}"],
        )
        found = cursor.fetchall()
    partitions, default = [], []
    for name, rows in found:
        if name == spec.default_partition:
            default.append(Partition(spec.name, name, None, None, int(rows)))
            continue
        start = datetime.strptime(name.removeprefix(f"{spec.name}_p"), "%Y%m").replace(tzinfo=UTC)
        end = (start + timedelta(days=32)).replace(day=1)
        partitions.append(Partition(spec.name, name, start, end, int(rows)))
    return sorted(partitions, key=lambda p: p.name) + default


def partitions_make(
    *,
    tables: Iterable[str] | None = None,
    months_ahead: int | None = None,
    since: datetime | None = None,
    progress: Callable[[str], None] = lambda line: None,
) -> PartitionsReport:
    """Each month up to `months_ahead` (KEEPER_PARTITIONS_AHEAD) past now gets its partition in every
    table named (all of them for None), and rows that waited in a default partition move into theirs."""
    ahead = settings.KEEPER_PARTITIONS_AHEAD if months_ahead is None else months_ahead
    if ahead < 0:
        raise InvalidInput("months ahead must be zero or more", code="invalid_months_ahead")
    report = PartitionsReport()
    for spec in partitioned_tables(tables):
        for name, _start, _end, moved in apply(m.PartitionsMade(spec.name, since, ahead)):
            report.made.append(name)
            report.moved_from_default += moved
            default = spec.default_partition
            progress(f"made {name}" + (f", {moved} row(s) moved in from {default}" if moved else ""))
    return report


def partitions_retention(
    *,
    tables: Iterable[str] | None = None,
    retention_days: float | None = None,
    dry_run: bool = False,
    progress: Callable[[str], None] = lambda line: None,
) -> PartitionsReport:
    """Drop, oldest first, each month's partition of the tables named (all for None) that ended more
    than its table's retention (`retention_days` overrides it; 0 keeps everything) ago and that nothing
    still needs; months kept are named with what keeps them."""
    if retention_days is not None and retention_days < 0:
        raise InvalidInput("retention must be zero or more days", code="invalid_age")
    report = PartitionsReport(dry_run=dry_run)
    for spec in partitioned_tables(tables):
        report.merge(_retention(spec, retention_days, dry_run, progress))
    return report


def _retention(
    spec: PartitionedTable, retention_days: float | None, dry_run: bool, progress: Callable[[str], None]
) -> PartitionsReport:
    report = PartitionsReport(dry_run=dry_run)
    partitions = partitions_of(spec.name)
    report.default_rows[spec.name] = sum(p.approx_rows for p in partitions if p.range_from is None)
    days = spec.retention_days() if retention_days is None else retention_days
    if not days:
        return report
    if spec.owner_only and "owner" not in settings.DATABASES:
        report.skipped[spec.name] = (
            "its months go only as the owner role: set DATABASE_OWNER_URL where this runs"
        )
        progress(f"{spec.name}: {report.skipped[spec.name]}")
        return report
    cutoff = timezone.now() - timedelta(days=days)
    due = [p for p in partitions if p.range_to is not None and p.range_to <= cutoff]
    for number, partition in enumerate(due, start=1):
        outcome, keeping = apply(
            m.PartitionDropped(spec.name, partition.name, cutoff, dry_run=dry_run, as_owner=spec.owner_only)
        )
        if outcome in ("dropped", "would_drop"):
            report.dropped.append(partition.name)
        elif outcome == "kept":
            report.kept[partition.name] = keeping
        verb = {
            "dropped": "dropped",
            "would_drop": "would be dropped",
            "kept": f"kept ({keeping}: {spec.keeps})",
        }
        progress(
            f"{number}/{len(due)} {partition.name} (~{partition.approx_rows} rows): {verb.get(outcome, outcome)}"
        )
        if outcome == "dropped":
            logger.info("retention: dropped %s (~%s rows)", partition.name, partition.approx_rows)
    return report


def partitions_maintain() -> PartitionsReport:
    """The beat's task: partitions ahead in every table, then each table's retention by the settings."""
    return partitions_make().merge(partitions_retention())


def partitions_make_after_migrate(*, using: str, plan: Any = None, **_: Any) -> None:
    """post_migrate after `migrate` (not a flush), as the role that migrated: every partitioned table's
    months ahead, for those the migrations left partitioned (one migrated back is a plain table)."""
    if plan is None:
        return
    with connections[using].cursor() as cursor:
        cursor.execute(
            "SELECT c.relname FROM pg_partitioned_table t JOIN pg_class c ON c.oid = t.partrelid"
            " WHERE c.relnamespace = 'public'::regnamespace"
        )
        partitioned = {row[0] for row in cursor.fetchall()}
    for name in PARTITIONED:
        if name in partitioned:
            partitions_ensure(using=using, table=name, months_ahead=settings.KEEPER_PARTITIONS_AHEAD)
