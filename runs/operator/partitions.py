"""agent_events' monthly partitions: made ahead of time (the beat, every migrate, the command), and
retention by whole partitions: a month goes only when every run created in it ended before the cutoff.

A run's events all live in the partition of the month it was created in (the partition key is the
run's creation time), so a dropped month takes whole histories, never the start of a live one; the
run's row (its final state and result) stays until `purge` deletes it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection
from django.utils import timezone

from core.errors import InvalidInput
from runs.kernel import apply
from runs.kernel import moves as m

logger = logging.getLogger(__name__)

DEFAULT_PARTITION = "agent_events_default"


@dataclass(frozen=True)
class EventPartition:
    name: str
    range_from: datetime | None  # None: the default partition
    range_to: datetime | None
    approx_rows: int  # the planner's estimate: counting would read the whole month

    def as_json(self) -> dict[str, Any]:
        return {
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
    # month -> how many runs of it are active, or ended after the cutoff
    kept: dict[str, int] = field(default_factory=dict)
    default_rows: int = 0  # approximate: rows waiting in the default partition for a month of their own

    def as_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def events_partitions() -> list[EventPartition]:
    """The partitions of agent_events, oldest first, the default one last (the catalog only: no tenant's rows)."""
    with connection.cursor() as cursor:
        cursor.execute(
            """SELECT c.relname, greatest(c.reltuples, 0)::bigint FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
                WHERE i.inhparent = 'public.agent_events'::regclass ORDER BY c.relname"""
        )
        found = cursor.fetchall()
    partitions = []
    for name, rows in found:
        if name == DEFAULT_PARTITION:
            continue
        start = datetime.strptime(name.removeprefix("agent_events_p"), "%Y%m").replace(tzinfo=UTC)
        end = (start + timedelta(days=32)).replace(day=1)
        partitions.append(EventPartition(name, start, end, int(rows)))
    default = [
        EventPartition(name, None, None, int(rows)) for name, rows in found if name == DEFAULT_PARTITION
    ]
    return sorted(partitions, key=lambda p: p.name) + default


def events_partitions_make(
    *,
    months_ahead: int | None = None,
    since: datetime | None = None,
    progress: Callable[[str], None] = lambda line: None,
) -> PartitionsReport:
    """Each month up to `months_ahead` (KEEPER_EVENTS_PARTITIONS_AHEAD) past now gets its partition, and
    rows that waited in the default partition move into theirs."""
    ahead = settings.KEEPER_EVENTS_PARTITIONS_AHEAD if months_ahead is None else months_ahead
    if ahead < 0:
        raise InvalidInput("months ahead must be zero or more", code="invalid_months_ahead")
    report = PartitionsReport()
    for name, _start, _end, moved in apply(m.EventPartitionsMade(since, ahead)):
        report.made.append(name)
        report.moved_from_default += moved
        progress(f"made {name}" + (f", {moved} event(s) moved in from {DEFAULT_PARTITION}" if moved else ""))
    return report


def events_retention(
    *,
    retention_days: float | None = None,
    dry_run: bool = False,
    progress: Callable[[str], None] = lambda line: None,
) -> PartitionsReport:
    """Drop each month's partition whose runs all ended more than `retention_days`
    (KEEPER_EVENTS_RETENTION_DAYS; 0 keeps everything) ago, oldest first; months with a live run, or
    one that ended after the cutoff, are kept and named."""
    days = settings.KEEPER_EVENTS_RETENTION_DAYS if retention_days is None else retention_days
    if days < 0:
        raise InvalidInput("retention must be zero or more days", code="invalid_age")
    report = PartitionsReport(dry_run=dry_run)
    partitions = events_partitions()
    report.default_rows = sum(p.approx_rows for p in partitions if p.range_from is None)
    if not days:
        return report
    cutoff = timezone.now() - timedelta(days=days)
    due = [p for p in partitions if p.range_to is not None and p.range_to <= cutoff]
    for number, partition in enumerate(due, start=1):
        outcome, live = apply(m.EventPartitionDropped(partition.name, cutoff, dry_run=dry_run))
        if outcome in ("dropped", "would_drop"):
            report.dropped.append(partition.name)
        elif outcome == "kept":
            report.kept[partition.name] = live
        verb = {
            "dropped": "dropped",
            "would_drop": "would be dropped",
            "kept": f"kept ({live} run(s) not ended before the cutoff)",
        }
        progress(
            f"{number}/{len(due)} {partition.name} (~{partition.approx_rows} events): {verb.get(outcome, outcome)}"
        )
        if outcome == "dropped":
            logger.info("events retention: dropped %s (~%s events)", partition.name, partition.approx_rows)
    return report


def events_partitions_maintain() -> PartitionsReport:
    """The beat's task: partitions ahead, then retention by the settings."""
    made = events_partitions_make()
    report = events_retention()
    report.made, report.moved_from_default = made.made, made.moved_from_default
    return report
