"""The Python client registers a workflow's signals, sends one, and hands the next claim's signals to
the worker, as the documentation promises signals to outside workers."""

from __future__ import annotations

import pytest

from core.api_auth import api_key_create

pytestmark = pytest.mark.django_db(transaction=True)


def test_an_outside_worker_waits_for_a_signal_through_the_client(live_server, tenant) -> None:
    from keeper_client import KeeperClient, KeeperError

    client = KeeperClient(live_server.url, api_key_create(tenant=tenant, name="w", scope="write").plaintext)
    try:
        registered = client.register_workflow(
            "ext.ship", "1", ["wait", "ship"], signals=["shipped"], approval_guarded_steps=["ship"]
        )
        assert (registered["signals"], registered["approval_guarded_steps"]) == (["shipped"], ["ship"])
        run_id = client.start_run("ext.ship", {"order_id": "o-7"})["run_id"]
        claim = client.claim(["ext.ship"], wait_seconds=0)
        assert claim is not None and claim.signals == []
        client.commit(
            claim, claim.state, suspend={"reason": "signal", "detail": "waiting for signal shipped"}
        )
        sent = client.signal(run_id, "shipped", {"tracking": "TR-1"}, idempotency_key="courier-1")
        assert client.signal(run_id, "shipped", {"tracking": "TR-1"}, idempotency_key="courier-1") == sent
        with pytest.raises(KeeperError) as undeclared:
            client.signal(run_id, "delivered", {}, idempotency_key="courier-2")
        assert undeclared.value.code == "unknown_signal"
        again = client.claim(["ext.ship"], wait_seconds=0)
        assert again is not None and again.run_id == run_id
        assert [(s["signal"], s["payload"]) for s in again.signals] == [("shipped", {"tracking": "TR-1"})]
    finally:
        client.close()
