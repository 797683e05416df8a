"""A run that stops waiting for good (cancelled, failed, completed, or its subject erased) closes its
pending approval: else it stays pending in the support inbox with buttons that can only answer 409,
until its TTL. Closed as `expired`, decided by Keeper, the note saying why.
Approvals left pending by such runs before this migration are closed the same way."""

from __future__ import annotations

from django.db import migrations

CLOSED = {
    "cancelled": "closed: the run was cancelled",
    "failed": "closed: the run failed",
    "completed": "closed: the run completed",
    "subject_erased": "closed: the subject of the run was erased",
}
WHY = (
    "CASE WHEN r.suspend_reason = 'subject_erased' THEN '{subject_erased}' "
    "WHEN r.status = 'cancelled' THEN '{cancelled}' WHEN r.status = 'failed' THEN '{failed}' "
    "ELSE '{completed}' END"
).format(**CLOSED)
STOPPED = "(r.status IN ('cancelled', 'failed', 'completed') OR r.suspend_reason = 'subject_erased')"

FUNCTION = f"""
CREATE FUNCTION keeper_approvals_close() RETURNS trigger
  LANGUAGE plpgsql SET search_path = pg_catalog, public AS $$
BEGIN
  UPDATE approvals a SET status = 'expired', decided_by = 'keeper', decided_at = statement_timestamp(),
         note = (SELECT {WHY} FROM (SELECT NEW.status, NEW.suspend_reason) AS r(status, suspend_reason))
   WHERE a.run_id = NEW.run_id AND a.status = 'pending';
  RETURN NULL;
END $$;
CREATE TRIGGER agent_runs_approvals_close AFTER UPDATE OF status, suspend_reason ON agent_runs
  FOR EACH ROW WHEN (
    (NEW.status IN ('cancelled', 'failed', 'completed') AND OLD.status IS DISTINCT FROM NEW.status)
    OR (NEW.suspend_reason = 'subject_erased' AND OLD.suspend_reason IS DISTINCT FROM 'subject_erased'))
  EXECUTE FUNCTION keeper_approvals_close();
"""

# As the owner, the policies not forced on it for this one statement.
BACKFILL = f"""
SET CONSTRAINTS ALL IMMEDIATE;
ALTER TABLE approvals NO FORCE ROW LEVEL SECURITY;
ALTER TABLE agent_runs NO FORCE ROW LEVEL SECURITY;
UPDATE approvals a SET status = 'expired', decided_by = 'keeper', decided_at = statement_timestamp(), note = {WHY}
  FROM agent_runs r WHERE r.run_id = a.run_id AND a.status = 'pending' AND {STOPPED};
ALTER TABLE approvals FORCE ROW LEVEL SECURITY;
ALTER TABLE agent_runs FORCE ROW LEVEL SECURITY;
"""


class Migration(migrations.Migration):
    dependencies = [("runs", "0027_webhook_one_subscription_per_url")]

    operations = [
        migrations.RunSQL(
            [FUNCTION, BACKFILL],
            [
                "DROP TRIGGER agent_runs_approvals_close ON agent_runs",
                "DROP FUNCTION keeper_approvals_close()",
            ],
        )
    ]
