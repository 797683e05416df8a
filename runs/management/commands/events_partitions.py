"""python manage.py events_partitions [--ahead MONTHS] [--retention-days DAYS] [--dry-run] [--json]:
`partitions agent_events`, under its earlier name."""

from __future__ import annotations

from runs.management.commands import partitions


class Command(partitions.Command):
    help = "`partitions agent_events`: agent_events' monthly partitions made ahead, old months dropped."
    tables = ("agent_events",)
