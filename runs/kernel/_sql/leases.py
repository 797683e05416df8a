"""Leases: taken, renewed and given back in one statement each, without an event."""

from __future__ import annotations

from core.db import wire

# The old owner comes from the locked row in FROM (RETURNING shows only new values before PG 18).
_LEASE_TAKE = """
UPDATE agent_runs r
   SET lease_owner = %(owner)s,
       lease_expires_at = statement_timestamp() + make_interval(secs => %(ttl)s),
       lease_epoch = r.lease_epoch + 1,
       attempt = r.attempt + 1,
       wake_at = NULL
  FROM (SELECT run_id, lease_owner, lease_epoch FROM agent_runs
         WHERE run_id = %(run_id)s AND tenant_id = %(tenant_id)s FOR UPDATE) old
 WHERE r.run_id = %(run_id)s AND r.run_id = old.run_id AND r.tenant_id = %(tenant_id)s
   AND (r.status = 'running' OR (r.status = 'suspended' AND r.resume_requested_at IS NOT NULL))
   AND NOT r.imported
   AND (r.lease_owner IS NULL OR r.lease_expires_at < statement_timestamp())
   AND (r.wake_at IS NULL OR r.wake_at <= statement_timestamp())
   -- an external workflow's runs go to outside workers only (runs/external/), all others to Keeper's
   AND %(external)s = EXISTS (SELECT 1 FROM external_workflows w WHERE w.tenant_id = r.tenant_id
                               AND w.name = r.workflow_name AND w.version = r.workflow_version)
RETURNING r.tenant_id, r.lease_epoch, r.lease_expires_at, r.state_revision, r.next_step, r.state,
          r.status, r.resume_requested_by, r.workflow_name, r.workflow_version, r.state_schema_version, r.attempt,
          old.lease_owner, old.lease_epoch, r.child_of_run_id, r.replay
"""

_LEASE_RENEW = """
UPDATE agent_runs SET lease_expires_at = statement_timestamp() + make_interval(secs => %(ttl)s)
 WHERE run_id = %(run_id)s AND tenant_id = %(tenant_id)s
   AND lease_epoch = %(epoch)s AND lease_owner = %(owner)s
RETURNING lease_expires_at
"""

# A holder that gives the run back without having tried gives its try back too: a claim followed by a
# release (an outside worker with nothing to do yet) is not a failed attempt.
_LEASE_RELEASE = """
UPDATE agent_runs SET lease_owner = NULL, lease_expires_at = NULL,
       attempt = CASE WHEN %(attempted)s THEN attempt ELSE greatest(attempt - 1, 0) END,
       wake_at = statement_timestamp() + make_interval(secs => %(delay)s)
 WHERE run_id = %(run_id)s AND tenant_id = %(tenant_id)s
   AND lease_epoch = %(epoch)s AND lease_owner = %(owner)s
RETURNING run_id
"""

_LEASE_DEFER = """
UPDATE agent_runs SET lease_expires_at = statement_timestamp(), attempt = greatest(attempt - 1, 0),
       wake_at = statement_timestamp() + make_interval(secs => %(delay)s)
 WHERE run_id = %(run_id)s AND tenant_id = %(tenant_id)s
   AND lease_epoch = %(epoch)s AND lease_owner = %(owner)s
RETURNING run_id
"""

_TYPES = {
    "run_id": wire.UUID,
    "tenant_id": wire.UUID,
    "owner": wire.TEXT,
    "ttl": wire.FLOAT8,
    "external": wire.BOOL,
    "epoch": wire.INT8,
    "delay": wire.FLOAT8,
    "attempted": wire.BOOL,
}


def _statement(name: str, sql: str) -> wire.Statement:
    """Prepared per connection: a lease is taken and given back for every task a worker runs."""
    return wire.Statement.named(name, sql, _TYPES)


LEASE_TAKE = _statement("keeper_lease_take", _LEASE_TAKE)
LEASE_RENEW = _statement("keeper_lease_renew", _LEASE_RENEW)
LEASE_RELEASE = _statement("keeper_lease_release", _LEASE_RELEASE)
LEASE_DEFER = _statement("keeper_lease_defer", _LEASE_DEFER)

# Across tenants, through the SECURITY DEFINER function (functions/redispatch.sql), which marks the
# runs dispatched and returns only their ids and tenants (row-level security hides the rows otherwise).
REDISPATCH_CLAIM = "SELECT run_id, tenant_id FROM keeper_redispatch_claim(%(grace)s, %(limit)s)"
