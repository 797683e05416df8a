"""agent_events' monthly partitions: made ahead, and dropped whole by retention (functions/keeper_events_*)."""

from __future__ import annotations

ENSURE = """
SELECT partition_name, range_from, range_to, moved
  FROM keeper_events_partitions_ensure(%(since)s::timestamptz, %(ahead)s::int)
"""

DROP = """
SELECT outcome, live_runs FROM keeper_events_partition_drop(%(partition)s::text, %(cutoff)s::timestamptz, %(dry_run)s::boolean)
"""
