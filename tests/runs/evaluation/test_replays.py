"""Replays with a change, on real parts: a real worker replays a support conversation whose refund was
paid, and the payments system hears nothing from it (the refund answered from the original's record);
a second configuration of the model diverges where it should; an undecided approval is refused, not
waited for; a replay tells no webhook and is not in the charts."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from console.charts import charts_data
from runs.engine.replay_models import RunReplay
from runs.engine.runs import run_start
from runs.evaluation.selectors import replay_compare
from runs.evaluation.services import replay_start
from runs.kernel.models import AgentEvent, Approval, ToolOperation
from runs.webhooks.models import WebhookDelivery, WebhookSubscription
from tests.processes import wait_until
from tests.runs.workflows.test_support_agent import _drive, _refund_flow, _say, _start

pytestmark = pytest.mark.django_db(transaction=True)


class Recorder:
    """An HTTP server that records every request and answers 500: stands where the payments system
    would be, so a replay that called it would be seen."""

    def __init__(self) -> None:
        self.requests: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def _any(self) -> None:
                outer.requests.append(f"{self.command} {self.path}")
                self.send_response(500)
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_GET = do_POST = _any  # noqa: N815 - http.server's naming

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    server = Recorder()
    yield server
    server.server.shutdown()
    server.server.server_close()


def _settled(run_id: Any) -> bool:
    compared = replay_compare(replay=RunReplay.objects.get(run_id=run_id))
    return compared is not None and compared.settled


ORDER = {"order_id": "o-300", "customer_id": "c-1", "amount_minor": 2500, "currency": "EUR",
         "status": "delivered", "refunded_minor": 0}  # fmt: skip


def test_a_real_worker_replays_a_paid_refund_without_calling_the_payments_system(
    tenant, sandbox, api, processes, recorder
):
    original = _refund_flow(tenant, sandbox, api, "o-300")
    [paid] = sandbox.ledger("o-300")
    # The worker's payments system is the recorder: any request the replay made would land there.
    processes.worker(pool="solo", env={"KEEPER_SANDBOX_URL": recorder.url + "/sandbox"})
    replay = replay_start(
        run_id=original.run_id,
        actor="test",
        overrides={"tools": {"lookup_order": [{"arguments": {"order_id": "o-300"}, "result": ORDER}]}},
    )
    wait_until(lambda: _settled(replay.run_id), timeout=60, message="the replay to settle")

    assert recorder.requests == []  # no lookup, no refund, no reconciliation lookup: nothing was sent
    assert sandbox.ledger("o-300") == [paid]
    assert not ToolOperation.objects.filter(run_id=replay.run_id).exists()
    assert not Approval.objects.filter(run_id=replay.run_id).exists()
    replay.refresh_from_db()
    assert replay.replay and (replay.status, replay.suspend_reason) == ("suspended", "awaiting_input")
    compared = replay_compare(replay=RunReplay.objects.get(run_id=replay.run_id))
    assert compared is not None and compared.same_moves, compared.as_dict()
    assert [m.label() for m in compared.replay.moves][-1].startswith("reply: ")
    # The refund the replay reported is the original's, by its recorded id.
    [reply] = AgentEvent.objects.filter(run_id=replay.run_id, event_type="assistant_message")
    assert paid["refund_id"] in reply.payload["content"]
    assert compared.original.outcome == compared.replay.outcome == "suspended: awaiting_input"


def test_a_second_model_configuration_diverges_and_an_undecided_approval_is_refused(tenant, sandbox):
    sandbox.order("o-301")
    original = _drive(_start(tenant, subject="cust-8"))
    _say(tenant, original, "m-1", "Order o-301 arrived damaged. Can I get a refund?")
    original = _drive(original)
    assert original.suspend_reason == "approval_required"

    same = _drive(replay_start(run_id=original.run_id, actor="test"))
    other = _drive(
        replay_start(
            run_id=original.run_id,
            actor="test",
            overrides={"backends": {"support_model": "rules-no-refunds"}},
        )
    )
    # The same rules reach the same approval, which nobody decided: refused, never waited for.
    assert (same.status, same.suspend_reason) == ("suspended", "replay_refused")
    assert "waits for no person" in same.suspend_detail
    assert not Approval.objects.filter(run_id=same.run_id).exists()
    assert Approval.objects.filter(run_id=original.run_id).count() == 1
    same_cmp = replay_compare(replay=RunReplay.objects.get(run_id=same.run_id))
    assert same_cmp is not None and same_cmp.same_moves
    # The second configuration looks the order up and answers without proposing the refund.
    assert (other.status, other.suspend_reason) == ("suspended", "awaiting_input")
    compared = replay_compare(replay=RunReplay.objects.get(run_id=other.run_id))
    assert compared is not None and not compared.same_moves
    assert compared.diverged_at == 0
    first = compared.diverged_seq
    assert first["original"] is not None and first["replay"] is not None
    assert (
        compared.replay.moves[0].label().startswith("reply: ")
        and "A person will look" in compared.replay.moves[0].text
    )
    [reply] = AgentEvent.objects.filter(run_id=other.run_id, event_type="assistant_message")
    assert reply.payload["responder"] == "rules-v1-no-refunds"
    assert any(d["path"] == "refund_request.order_id" and d["kind"] == "removed" for d in compared.state_diff)


def test_a_changed_prompt_reaches_the_replays_context_and_a_replay_writes_no_memory(tenant, sandbox):
    original = _drive(_start(tenant, subject="cust-10"))
    _say(tenant, original, "m-1", "Yes, please remember that I prefer sms for updates.")
    original = _drive(original)
    from memory.models import MemoryItem

    kept = MemoryItem.objects.filter(subject_id="cust-10").count()
    assert kept == 1
    long_prompt = "You help the customers of an online shop. " * 20
    replay = _drive(replay_start(run_id=original.run_id, actor="test", overrides={"prompt": long_prompt}))
    assert replay.state["system_prompt"] == long_prompt
    compared = replay_compare(replay=RunReplay.objects.get(run_id=replay.run_id))
    assert compared is not None and compared.replay.context_tokens > compared.original.context_tokens
    assert MemoryItem.objects.filter(subject_id="cust-10").count() == kept
    # Nothing a replay said is learned: no fact, no episode, no procedure.
    from memory.procedures.services import Learned
    from runs.conversations.learning import run_learn
    from runs.conversations.procedures import run_procedures_learn

    assert run_learn(run_id=replay.run_id)["episode"] == 0 and run_learn(run_id=replay.run_id)["kept"] == 0
    assert run_procedures_learn(run_id=replay.run_id).as_json() == Learned().as_json()
    assert MemoryItem.objects.filter(subject_id="cust-10").count() == kept
    [reply] = AgentEvent.objects.filter(run_id=replay.run_id, event_type="assistant_message")
    assert "I will remember" in reply.payload["content"]


def test_a_replay_tells_no_webhook_and_is_not_in_the_charts(tenant):
    from django.utils import timezone

    WebhookSubscription.objects.create(
        tenant=tenant,
        url="https://hooks.example.com/k",
        event_types=["run.completed"],
        secret="s",
        created_by="t",
    )
    done = run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": 2}, actor="test").run
    done = _drive(done)
    assert done.status == "completed"
    before = WebhookDelivery.objects.filter(tenant=tenant).count()
    assert before == 1
    charted = charts_data(tenant_ids=[tenant.tenant_id], window="hour", now=timezone.now()).totals
    replay = _drive(replay_start(run_id=done.run_id, actor="test"))
    assert replay.status == "completed"
    assert WebhookDelivery.objects.filter(tenant=tenant).count() == before
    assert charts_data(tenant_ids=[tenant.tenant_id], window="hour", now=timezone.now()).totals == charted
    assert json.dumps(charted)  # the totals are plain numbers
