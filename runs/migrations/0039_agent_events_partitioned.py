"""agent_events becomes a table partitioned by month of run_created_at (its run's creation time), so
retention drops whole months instead of deleting rows (runs/operator/partitions.py).

The table is rewritten: the old one is renamed, a partitioned one made like it (with run_created_at in
every unique key, as PostgreSQL requires), a partition made for every month that holds runs up to
KEEPER_EVENTS_PARTITIONS_AHEAD months ahead and a default one, the rows copied with their run's creation
time, the ids' sequence carried on, and the old table dropped. Row-level security, its policies, the
grants, the foreign keys and the rewrites trigger are carried over as they were.
"""

from django.conf import settings
from django.db import migrations, models

from runs.kernel.functions import functions_install
from runs.migrations import _rls

OLD = "agent_events_unpartitioned"
COLUMNS = (
    "id, run_id, tenant_id, seq, event_type, step_id, attempt, payload, actor, state_revision, state_digest, "
    "state, next_step, client_message_id, created_at, rewrites"
)


def _partition(apps, schema_editor):
    with schema_editor.connection.cursor() as cursor:
        run = cursor.execute
        run("LOCK TABLE agent_runs, agent_events IN SHARE MODE")
        # The owner reads every run and event here even where it has no policy of its own (a single role).
        run("ALTER TABLE agent_runs NO FORCE ROW LEVEL SECURITY")
        run("ALTER TABLE agent_events NO FORCE ROW LEVEL SECURITY")
        run(f"ALTER TABLE agent_events RENAME TO {OLD}")
        cursor.execute(
            "SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = %s::regclass",
            [OLD],
        )
        for (index,) in cursor.fetchall():
            run(f'ALTER INDEX "{index}" RENAME TO "{index[:50]}_unpartitioned"')
        run(f"ALTER SEQUENCE IF EXISTS agent_events_id_seq RENAME TO {OLD}_id_seq")
        run(f"ALTER TABLE {OLD} ADD COLUMN run_created_at timestamp with time zone")
        run(
            f"CREATE TABLE agent_events (LIKE {OLD} INCLUDING DEFAULTS INCLUDING IDENTITY INCLUDING CONSTRAINTS)"
            " PARTITION BY RANGE (run_created_at)"
        )
        run("ALTER TABLE agent_events ALTER COLUMN run_created_at SET NOT NULL")
        run("ALTER TABLE agent_events ADD CONSTRAINT agent_events_pkey PRIMARY KEY (id, run_created_at)")
        run(
            "ALTER TABLE agent_events ADD CONSTRAINT agent_events_run_seq UNIQUE (run_id, seq, run_created_at)"
        )
        run(
            "CREATE UNIQUE INDEX agent_events_run_client_message ON agent_events "
            "(run_id, client_message_id, run_created_at) WHERE client_message_id IS NOT NULL"
        )
        run(
            "CREATE INDEX agent_events_resume_verified ON agent_events (run_id) "
            "WHERE event_type = 'resume_verified'"
        )
        run("CREATE INDEX agent_events_rewritten ON agent_events (run_id, seq) WHERE rewrites > 0")
        cursor.execute(
            "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = %s::regclass AND contype = 'f'",
            [OLD],
        )
        for name, definition in cursor.fetchall():
            run(f'ALTER TABLE agent_events ADD CONSTRAINT "{name}" {definition}')
        run(
            "CREATE TRIGGER agent_events_rewritten BEFORE UPDATE ON agent_events "
            "FOR EACH ROW EXECUTE FUNCTION keeper_agent_event_rewritten()"
        )
        run("CREATE TABLE agent_events_default PARTITION OF agent_events DEFAULT")
        # The partitions are reached through agent_events only (its row-level security filters them).
        cursor.execute(
            "SELECT DISTINCT a.grantee::regrole::text, a.privilege_type FROM pg_class c, aclexplode(c.relacl) a "
            "WHERE c.oid = %s::regclass AND a.grantee <> c.relowner AND a.grantee <> 0",
            [OLD],
        )
        grants = cursor.fetchall()
        for grantee, privilege in grants:
            run(f"GRANT {privilege} ON agent_events TO {grantee}")
        for grantee in {grantee for grantee, _ in grants}:
            run(f"REVOKE ALL ON agent_events_default FROM {grantee}")
        cursor.execute(
            "SELECT policyname, permissive, roles::text[], cmd, qual, with_check FROM pg_policies "
            "WHERE schemaname = 'public' AND tablename = %s",
            [OLD],
        )
        for name, permissive, roles, command, using, check in cursor.fetchall():
            to = ", ".join("PUBLIC" if role == "public" else f'"{role}"' for role in roles)
            run(
                f'CREATE POLICY "{name}" ON agent_events AS {permissive} FOR {command} TO {to}'
                + (f" USING ({using})" if using else "")
                + (f" WITH CHECK ({check})" if check else "")
            )
        run("ALTER TABLE agent_events ENABLE ROW LEVEL SECURITY")
        functions_install(using=schema_editor.connection.alias)
        _rls.execute_grant(
            schema_editor,
            [
                "keeper_events_partitions_ensure(timestamp with time zone, integer)",
                "keeper_events_partition_drop(text, timestamp with time zone, boolean)",
            ],
        )
        run(
            "SELECT count(*) FROM keeper_events_partitions_ensure((SELECT min(created_at) FROM agent_runs), %s)",
            [settings.KEEPER_EVENTS_PARTITIONS_AHEAD],
        )
        run(
            f"INSERT INTO agent_events ({COLUMNS}, run_created_at) "
            f"SELECT {', '.join('e.' + c.strip() for c in COLUMNS.split(','))}, r.created_at "
            f"FROM {OLD} e JOIN agent_runs r ON r.run_id = e.run_id"
        )
        run(
            "SELECT setval(pg_get_serial_sequence('agent_events', 'id'), "
            f"coalesce((SELECT max(id) FROM {OLD}), 0) + 1, false)"
        )
        run(f"DROP TABLE {OLD}")
        run("ALTER TABLE agent_events FORCE ROW LEVEL SECURITY")
        run("ALTER TABLE agent_runs FORCE ROW LEVEL SECURITY")


class Migration(migrations.Migration):
    dependencies = [("runs", "0038_replays_and_evaluation_sets")]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunPython(_partition, migrations.RunPython.noop)],
            state_operations=[
                migrations.AddField(
                    model_name="agentevent",
                    name="run_created_at",
                    field=models.DateTimeField(),
                    preserve_default=False,
                ),
                migrations.RemoveConstraint(model_name="agentevent", name="agent_events_run_seq"),
                migrations.RemoveConstraint(model_name="agentevent", name="agent_events_run_client_message"),
                migrations.AddConstraint(
                    model_name="agentevent",
                    constraint=models.UniqueConstraint(
                        fields=("run", "seq", "run_created_at"), name="agent_events_run_seq"
                    ),
                ),
                migrations.AddConstraint(
                    model_name="agentevent",
                    constraint=models.UniqueConstraint(
                        condition=models.Q(("client_message_id__isnull", False)),
                        fields=("run", "client_message_id", "run_created_at"),
                        name="agent_events_run_client_message",
                    ),
                ),
            ],
        ),
    ]
