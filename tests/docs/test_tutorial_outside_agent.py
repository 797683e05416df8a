"""docs/tutorials/outside-agent.md, run as written: the registration its curl sends, then its Python
blocks saved as one module and started as a real worker process against a live Keeper and the
payments sandbox; the run completes with exactly one refund in the ledger."""

from __future__ import annotations

import json
import os
import re
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from core.api_auth import api_key_create
from core.processes import ROOT
from tests.processes import wait_until
from tests.runs.workflows.test_refund_workflow import Sandbox

pytestmark = pytest.mark.django_db(transaction=True)

PAGE = ROOT / "docs" / "tutorials" / "outside-agent.md"
CLIENT_PATH = str(ROOT / "clients" / "python")


def python_blocks() -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", PAGE.read_text(), flags=re.S | re.M)


def registration() -> dict[str, Any]:
    """The JSON body of the page's `curl ... /workflows/external/` call."""
    match = re.search(r"/api/v1/workflows/external/\".*?-d '(\{.*?\})'\n", PAGE.read_text(), flags=re.S)
    assert match, "the page registers the workflow with curl"
    body: dict[str, Any] = json.loads(match.group(1))
    return body


def _get(url: str, key: str) -> Any:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def test_the_tutorials_module_is_whole_and_registers_what_it_runs():
    source = "\n\n".join(python_blocks())
    compile(source, str(PAGE), "exec")
    body = registration()
    assert body["name"] == "ext.refund" and body["steps"] == ["lookup", "refund", "verify"]
    for step in body["steps"]:
        assert f"def {step}(ctx: StepContext)" in source


def test_the_tutorials_worker_completes_its_refund_once(
    live_server, tenant, settings, processes, tmp_path: Path
):
    from keeper_client import KeeperClient

    settings.KEEPER_SANDBOX_URL = live_server.url + "/sandbox"  # resume verification's lookup
    sandbox = Sandbox(settings.KEEPER_SANDBOX_URL)
    sandbox.order("o-9")
    key = api_key_create(tenant=tenant, name="billing", scope="write").plaintext
    client = KeeperClient(live_server.url, key)
    try:
        client.register_workflow(**registration())
        run_id = client.start_run("ext.refund", {"order_id": "o-9"}, idempotency_key="refund-o-9")["run_id"]
    finally:
        client.close()
    module = tmp_path / "refund_worker.py"
    module.write_text("\n\n".join(python_blocks()))
    processes.script(
        [str(module)],
        {
            "KEEPER_URL": live_server.url,
            "KEEPER_API_KEY": key,
            "PYTHONPATH": os.pathsep.join([CLIENT_PATH, os.environ.get("PYTHONPATH", "")]),
        },
    )
    url = f"{live_server.url}/api/v1/runs/{run_id}/"
    wait_until(lambda: _get(url, key)["status"] == "completed", timeout=90, message="the run to complete")
    [refund] = sandbox.ledger("o-9")
    assert _get(url, key)["result"] == {"refund_id": refund["refund_id"], "refunds": [refund["refund_id"]]}
