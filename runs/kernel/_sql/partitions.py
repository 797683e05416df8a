"""Monthly partitions of the tables partitioned by time: made ahead, and dropped whole by retention
(functions/keeper_partitions_ensure.sql, functions/keeper_partition_drop.sql)."""

from __future__ import annotations

ENSURE = """
SELECT partition_name, range_from, range_to, moved
  FROM keeper_partitions_ensure(%(table)s::text, %(since)s::timestamptz, %(ahead)s::int)
"""

DROP = """
SELECT outcome, keeping
  FROM keeper_partition_drop(%(table)s::text, %(partition)s::text, %(cutoff)s::timestamptz, %(dry_run)s::boolean)
"""
