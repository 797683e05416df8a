"""Rewriting a plain table as one partitioned by month of a timestamp column, rows and all (used by
runs 0040 and console 0007; agent_events' own rewrite, 0039, adds its key column first).

The old table is renamed, a partitioned one made like it, with the key in its primary key and in each
unique constraint (PostgreSQL requires it), its other indexes, foreign keys, triggers, grants,
row-level security and policies as they were; a partition for every month its rows span up to
KEEPER_PARTITIONS_AHEAD months ahead and a default one; the rows copied, the ids' sequence carried
on, and the old table dropped. The partitions are reached through the table only.
"""

from __future__ import annotations

import re
from typing import Any

from django.conf import settings

from runs.kernel.functions import functions_install
from runs.migrations import _rls

SIGNATURES = (
    "keeper_partitions_ensure(text, timestamp with time zone, integer)",
    "keeper_partition_drop(text, text, timestamp with time zone, boolean)",
)


def partition_by_month(schema_editor: Any, *, table: str, key: str) -> None:
    old = f"{table}_unpartitioned"
    with schema_editor.connection.cursor() as cursor:

        def rows(sql: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
            cursor.execute(sql, params)
            return cursor.fetchall()

        run = cursor.execute
        run(f"LOCK TABLE {table} IN SHARE MODE")
        ((force,),) = rows("SELECT relforcerowsecurity FROM pg_class WHERE oid = %s::regclass", [table])
        ((secured,),) = rows("SELECT relrowsecurity FROM pg_class WHERE oid = %s::regclass", [table])
        # What the new table carries over, read while the old one still has its name.
        constraints = rows(
            "SELECT conname, contype, pg_get_constraintdef(oid) FROM pg_constraint"
            " WHERE conrelid = %s::regclass AND contype IN ('u', 'f') ORDER BY conname",
            [table],
        )
        indexes = rows(
            "SELECT pg_get_indexdef(i.indexrelid) FROM pg_index i WHERE i.indrelid = %s::regclass"
            " AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = i.indexrelid)"
            " ORDER BY i.indexrelid",
            [table],
        )
        triggers = rows(
            "SELECT pg_get_triggerdef(oid) FROM pg_trigger WHERE tgrelid = %s::regclass AND NOT tgisinternal",
            [table],
        )
        grants = rows(
            "SELECT DISTINCT a.grantee::regrole::text, a.privilege_type FROM pg_class c, aclexplode(c.relacl) a"
            " WHERE c.oid = %s::regclass AND a.grantee <> c.relowner AND a.grantee <> 0",
            [table],
        )
        policies = rows(
            "SELECT policyname, permissive, roles::text[], cmd, qual, with_check FROM pg_policies"
            " WHERE schemaname = 'public' AND tablename = %s",
            [table],
        )
        ((sequence,),) = rows("SELECT pg_get_serial_sequence(%s, 'id')", [table])
        # The owner copies every tenant's rows, whatever its own policy.
        run(f"ALTER TABLE {table} NO FORCE ROW LEVEL SECURITY")
        run(f"ALTER TABLE {table} RENAME TO {old}")
        for (index,) in rows(
            "SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = %s::regclass",
            [old],
        ):
            run(f'ALTER INDEX "{index}" RENAME TO "{index[:50]}_unpartitioned"')
        if sequence:
            run(f"ALTER SEQUENCE {sequence} RENAME TO {old}_id_seq")
        run(
            f"CREATE TABLE {table} (LIKE {old} INCLUDING DEFAULTS INCLUDING IDENTITY INCLUDING CONSTRAINTS)"
            f" PARTITION BY RANGE ({key})"
        )
        run(f"ALTER TABLE {table} ADD CONSTRAINT {table}_pkey PRIMARY KEY (id, {key})")
        for name, kind, definition in constraints:
            if kind == "u":  # UNIQUE (a, b) -> UNIQUE (a, b, key): as strict for rows of one instant
                definition = re.sub(r"\)\s*$", f", {key})", definition)
            run(f'ALTER TABLE {table} ADD CONSTRAINT "{name}" {definition}')
        for (definition,) in indexes:
            run(definition)
        for (definition,) in triggers:
            run(definition)
        run(f"CREATE TABLE {table}_default PARTITION OF {table} DEFAULT")
        for grantee, privilege in grants:
            run(f"GRANT {privilege} ON {table} TO {grantee}")
        for (grantee,) in rows(
            "SELECT DISTINCT a.grantee::regrole::text FROM pg_class c, aclexplode(c.relacl) a"
            " WHERE c.oid = %s::regclass AND a.grantee <> c.relowner AND a.grantee <> 0",
            [f"{table}_default"],
        ):
            run(f"REVOKE ALL ON {table}_default FROM {grantee}")
        for name, permissive, roles, command, using, check in policies:
            to = ", ".join("PUBLIC" if role == "public" else f'"{role}"' for role in roles)
            run(
                f'CREATE POLICY "{name}" ON {table} AS {permissive} FOR {command} TO {to}'
                + (f" USING ({using})" if using else "")
                + (f" WITH CHECK ({check})" if check else "")
            )
        if secured:
            run(f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY")
        functions_install(using=schema_editor.connection.alias)
        _rls.execute_grant(schema_editor, SIGNATURES)
        run(
            f"SELECT count(*) FROM keeper_partitions_ensure(%s, (SELECT min({key}) FROM {old}), %s)",
            [table, settings.KEEPER_PARTITIONS_AHEAD],
        )
        run(f"INSERT INTO {table} OVERRIDING SYSTEM VALUE SELECT * FROM {old}")
        run("SET CONSTRAINTS ALL IMMEDIATE")  # the copied rows' deferred key checks now, not at the ALTERs' expense
        if sequence:
            run(
                f"SELECT setval(pg_get_serial_sequence(%s, 'id'), coalesce((SELECT max(id) FROM {old}), 0) + 1, false)",
                [table],
            )
        run(f"DROP TABLE {old}")
        if force:
            run(f"ALTER TABLE {table} FORCE ROW LEVEL SECURITY")
