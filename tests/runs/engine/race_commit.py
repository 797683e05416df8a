"""A separate process that commits one revision at an agreed instant (for the cross-process race).

Usage: python -m tests.runs.engine.race_commit RUN_ID REVISION EPOCH OWNER GO_AT_UNIX_TIME
Prints "committed SEQ" or "fenced".
"""

from __future__ import annotations

import sys
import time
from uuid import UUID

import django


def main() -> None:
    django.setup()
    from core.tenancy import run_tenant, tenant_bind

    run_id = sys.argv[1]
    tenant_id = run_tenant(UUID(run_id))
    assert tenant_id is not None, f"no run {run_id}"
    with tenant_bind(tenant_id):  # as a worker's task: the run's tenant (row-level security)
        _race()


def _race() -> None:
    from runs.engine import store
    from runs.engine.state import state_encode

    run_id, revision, epoch, owner, go_at = sys.argv[1:6]
    encoded = state_encode({"n": 3, "committed_by": sys.argv[6] if len(sys.argv) > 6 else "racer"})
    store.lease_renew(run_id=UUID(run_id), owner=owner, epoch=int(epoch), ttl=30)  # warm the connection
    time.sleep(max(0.0, float(go_at) - time.time()))
    seq = store.commit_step(
        run_id=UUID(run_id),
        expected_revision=int(revision),
        epoch=int(epoch),
        owner=owner,
        state_json=encoded.json,
        state_digest=encoded.digest,
        next_step="tick",
        status="running",
        event_type="step_completed",
        step_id="start",
        attempt=1,
        payload_json="{}",
    )
    print(f"committed {seq}" if seq else "fenced", flush=True)


if __name__ == "__main__":
    main()
