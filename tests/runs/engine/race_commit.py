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
        _race(tenant_id)


def _race(tenant_id: UUID) -> None:
    from runs.kernel import apply
    from runs.kernel import moves as m
    from runs.kernel.state import state_encode

    run_id, revision, epoch, owner, go_at = sys.argv[1:6]
    encoded = state_encode({"n": 3, "committed_by": sys.argv[6] if len(sys.argv) > 6 else "racer"})
    apply(
        m.LeaseRenewed(
            run_id=UUID(run_id),
            tenant_id=tenant_id,
            owner=owner,
            epoch=int(epoch),
            ttl=30,
        )
    )  # warm the connection
    time.sleep(max(0.0, float(go_at) - time.time()))
    held = m.Held(UUID(run_id), tenant_id, owner, int(epoch), int(revision), 1)
    seq = apply(m.StepCommitted(held, encoded, "start", "tick", {}))
    print(f"committed {seq}" if seq else "fenced", flush=True)


if __name__ == "__main__":
    main()
