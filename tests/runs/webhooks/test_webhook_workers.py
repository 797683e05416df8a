"""Webhooks with real worker processes: a worker killed (SIGKILL) mid-delivery loses nothing."""

from __future__ import annotations

import pytest

from runs.engine.runs import run_fail, run_start
from runs.webhooks.models import WebhookDelivery
from runs.webhooks.services import webhook_subscription_create
from tests.processes import wait_until
from tests.runs.webhooks.receiver import Receiver

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_a_worker_killed_while_a_delivery_is_in_flight_does_not_lose_it(tenant, processes, allow_http):
    receiver = Receiver(hold=60).start()  # keeps the first POST waiting, unanswered
    try:
        webhook_subscription_create(tenant=tenant, url=receiver.url, event_types=["run.failed"], actor="test")
        run = run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": 3}, actor="test").run
        run_fail(run_id=run.run_id, actor="user:ops", code="gave_up")
        processes.beat()
        local = {"KEEPER_WEBHOOKS_ALLOW_PRIVATE": "true"}  # the receiver listens on 127.0.0.1
        worker = processes.worker(env=local)
        assert receiver.arrived.wait(90), processes.logs()
        processes.kill(worker)  # SIGKILL while the POST is waiting for its answer
        delivery = WebhookDelivery.objects.get()
        assert delivery.status == "pending" and delivery.attempts == 1  # claimed, never recorded
        receiver.release.set()  # the receiver answers from now on (the dead worker hears nothing)

        processes.worker(env=local)
        wait_until(
            lambda: WebhookDelivery.objects.filter(status="delivered").exists(),
            timeout=120,
            message="the delivery after the worker's restart",
        )
        delivery.refresh_from_db()
        assert delivery.attempts == 2 and [h["status_code"] for h in delivery.history] == [200]
        per_event = receiver.accepted_per_event()
        assert per_event == {str(delivery.event_id): 2}  # the held POST was answered 200 too: at least once
    finally:
        receiver.stop()
