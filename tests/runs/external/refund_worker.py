"""An outside worker process for the tests: the Python client running a refund-like workflow against the sandbox.

It imports nothing of Keeper. KEEPER_CLIENT_CRASH_AT names a point of the operation protocol where it
kills itself with SIGKILL (once, remembered in KEEPER_CLIENT_CRASH_ONCE_DIR), like a machine losing power.
"""

from __future__ import annotations

import http.client
import json
import os
import select
import signal
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

from keeper_client import Applied, Complete, Fail, KeeperClient, Next, OperationFailed, StepContext, Worker
from keeper_client.client import Claim

CRASH_AT = os.environ.get("KEEPER_CLIENT_CRASH_AT", "")
ONCE_DIR = Path(os.environ.get("KEEPER_CLIENT_CRASH_ONCE_DIR", "/nonexistent"))
SANDBOX = urlsplit(os.environ["SANDBOX_URL"])


# The longest a sandbox call lasts (its socket timeout): Keeper waits that long after a start before
# it trusts a lookup's "not applied" for a refund this worker may have sent before it died.
CALL_TIMEOUT_S = 3.0


def crash(point: str) -> None:
    marker = ONCE_DIR / point
    if point == CRASH_AT and not marker.exists():
        marker.write_text("crashed")
        os.kill(os.getpid(), signal.SIGKILL)


def sandbox(
    method: str, path: str, body: Any = None, headers: dict[str, str] | None = None, on_sent: Any = None
):
    conn = http.client.HTTPConnection(SANDBOX.hostname or "127.0.0.1", SANDBOX.port, timeout=CALL_TIMEOUT_S)
    try:
        conn.request(
            method,
            SANDBOX.path + path,
            body=json.dumps(body) if body is not None else None,
            headers={"Content-Type": "application/json", **(headers or {})},
        )
        if on_sent is not None:
            select.select([conn.sock], [], [], 10)  # the sandbox has answered (applied) by now
            on_sent()
        response = conn.getresponse()
        return response.status, json.loads(response.read() or b"null")
    finally:
        conn.close()


def lookup(ctx: StepContext) -> Next:
    order_id = ctx.state["order_id"]
    status, order = sandbox("GET", f"/orders/{order_id}")
    if status != 200:
        raise RuntimeError(f"order lookup answered {status}")
    return Next({**ctx.state, "amount_minor": order["amount_minor"], "currency": order["currency"]}, "refund")


def look(key: str) -> Applied | bool | None:
    """The payments API's authoritative lookup by idempotency key: in a step, and when this worker
    takes a run over whose refund is in doubt (Worker's lookups)."""
    status, data = sandbox("GET", "/refunds?" + urlencode({"idempotency_key": key}))
    if status != 200 or data.get("authoritative") is not True:
        return None
    return Applied(data["refund"]["refund_id"], data["refund"]) if data["applied"] else False


def refund(ctx: StepContext) -> Next:
    state = ctx.state
    request = {
        "order_id": state["order_id"],
        "amount_minor": state["amount_minor"],
        "currency": state["currency"],
    }

    def send(key: str) -> Applied:
        crash("before_call")
        status, data = sandbox(
            "POST", "/refunds", request, {"Idempotency-Key": key}, on_sent=lambda: crash("after_request_sent")
        )
        crash("after_response")
        if status in (200, 201):
            return Applied(data["refund_id"], data)
        if 400 <= status < 500 and status not in (408, 409, 429):
            raise OperationFailed(f"{status}: {data}")
        raise RuntimeError(f"refund answered {status}")

    applied = ctx.operation(
        f"refund:{state['order_id']}",
        tool_name="payments.refund",
        tool_contract_version="payments.v1",
        request=request,
        send=send,
        lookup=look,
        call_timeout_s=CALL_TIMEOUT_S,
    )
    return Next({**state, "refund_id": applied.external_ref}, "verify")


def verify(ctx: StepContext) -> Complete | Fail:
    status, data = sandbox("GET", "/refunds?" + urlencode({"order_id": ctx.state["order_id"]}))
    refunds = data["results"]
    if len(refunds) != 1:
        return Fail(ctx.state, "refund_count", f"{len(refunds)} refunds")
    return Complete(ctx.state, {"refund_id": refunds[0]["refund_id"]})


class CrashingWorker(Worker):
    def _commit(self, claim: Claim, result: Any) -> None:
        super()._commit(claim, result)
        if claim.step == "refund":
            crash("after_commit")


def main() -> None:
    client = KeeperClient(os.environ["KEEPER_URL"], os.environ["KEEPER_API_KEY"], timeout=15)
    worker = CrashingWorker(
        client,
        {"ext.refund": {"lookup": lookup, "refund": refund, "verify": verify}},
        lookups={"payments.refund": look},
        worker_id=os.environ.get("WORKER_ID", "w"),
        wait_seconds=2,
        lease_ttl=float(os.environ.get("LEASE_TTL", "2")),
    )
    worker.run(max_claims=int(os.environ.get("MAX_CLAIMS", "1000")))


if __name__ == "__main__":
    main()
