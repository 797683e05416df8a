"""The artifact store on a real S3-protocol server (moto's server mode on 127.0.0.1): the same
records and checks as the local folder, keys prefixed by the tenant, and a stuck endpoint held to
the check's time limit."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from core.artifacts import (
    ArtifactMismatch,
    ArtifactMissing,
    ArtifactUnknown,
    artifact_get,
    artifact_put,
    artifact_put_many,
    artifact_store,
    artifacts_check,
)
from core.artifacts.reclaim import artifacts_erase_tenant, artifacts_tenant_left
from core.artifacts.s3 import S3ArtifactStore
from tests.s3 import S3, s3, s3_server  # noqa: F401 - the fixtures

pytestmark = pytest.mark.django_db


def test_blobs_go_to_the_bucket_under_the_tenants_prefix(tenant, other_tenant, s3: S3):  # noqa: F811
    assert isinstance(artifact_store(), S3ArtifactStore)
    ref = artifact_put(tenant_id=tenant.tenant_id, data=b"a long tool result", kind="tool_result")
    refs = artifact_put_many(
        tenant_id=other_tenant.tenant_id, blobs=[b"a long tool result", b""], kind="workspace"
    )
    hexdigest = ref["digest"].removeprefix("sha256:")
    assert s3.object_keys() == sorted(
        [
            f"{tenant.tenant_id}/{hexdigest[:2]}/{hexdigest}",
            f"{other_tenant.tenant_id}/{hexdigest[:2]}/{hexdigest}",
            f"{other_tenant.tenant_id}/e3/{refs[1]['digest'].removeprefix('sha256:')}",
        ]
    )
    assert artifact_get(tenant_id=tenant.tenant_id, ref=ref) == b"a long tool result"
    assert artifact_get(tenant_id=other_tenant.tenant_id, ref=refs[1]) == b""  # an empty file too
    with pytest.raises(ArtifactUnknown):
        artifact_get(tenant_id=tenant.tenant_id, ref=refs[1])  # only globex stored that one


def test_the_bucket_is_checked_like_the_folder(tenant, s3: S3):  # noqa: F811
    ref = artifact_put(tenant_id=tenant.tenant_id, data=b"a report", kind="run_state")
    key = f"{tenant.tenant_id}/{ref['digest'][7:9]}/{ref['digest'][7:]}"
    assert artifacts_check(tenant_id=tenant.tenant_id, value={"r": ref}).verified == 1
    s3.client().put_object(Bucket=s3.bucket, Key=key, Body=b"a rep0rt")  # changed behind Keeper's back
    with pytest.raises(ArtifactMismatch):
        artifact_get(tenant_id=tenant.tenant_id, ref=ref)
    s3.client().put_object(Bucket=s3.bucket, Key=key, Body=b"a report" * 10_000)  # and grown
    with pytest.raises(ArtifactMismatch):
        artifacts_check(tenant_id=tenant.tenant_id, value=[ref])
    s3.client().delete_object(Bucket=s3.bucket, Key=key)
    with pytest.raises(ArtifactMissing):
        artifact_get(tenant_id=tenant.tenant_id, ref=ref)
    # Stored again: the record is there, the missing object is written back.
    artifact_put(tenant_id=tenant.tenant_id, data=b"a report", kind="run_state")
    assert artifact_get(tenant_id=tenant.tenant_id, ref=ref) == b"a report"


def test_offboarding_a_tenant_empties_its_prefix_and_only_its_own(tenant, other_tenant, s3: S3):  # noqa: F811
    artifact_put_many(tenant_id=tenant.tenant_id, blobs=[b"one", b"two"], kind="workspace")
    kept = artifact_put(tenant_id=other_tenant.tenant_id, data=b"one", kind="workspace")
    # Bytes under the prefix whose record never committed go too.
    s3.client().put_object(Bucket=s3.bucket, Key=f"{tenant.tenant_id}/ab/{'ab' * 32}", Body=b"stray")
    assert artifacts_erase_tenant(tenant_id=tenant.tenant_id) == {"deleted": 3, "kept_shared": 0}
    assert artifacts_tenant_left(tenant_id=tenant.tenant_id) == 0
    assert [k.split("/")[0] for k in s3.object_keys()] == [str(other_tenant.tenant_id)]
    assert artifact_get(tenant_id=other_tenant.tenant_id, ref=kept) == b"one"


@pytest.fixture
def silent_endpoint() -> Iterator[str]:
    """A TCP server on 127.0.0.1 that accepts connections and never answers (a stuck endpoint)."""
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    listener.close()


def test_a_stuck_endpoint_costs_the_check_its_time_limit_not_the_callers_thread(
    tenant,
    s3: S3,  # noqa: F811
    settings,
    silent_endpoint,
):
    ref = artifact_put(tenant_id=tenant.tenant_id, data=b"slow", kind="run_state")
    options = {
        **settings.BACKENDS["artifact_store"]["OPTIONS"],
        "endpoint_url": silent_endpoint,
        "timeout": 30,
    }
    settings.BACKENDS = {
        **settings.BACKENDS,
        "artifact_store": {**settings.BACKENDS["artifact_store"], "OPTIONS": options},
    }
    started = time.monotonic()
    with pytest.raises(Exception) as refused:
        artifacts_check(tenant_id=tenant.tenant_id, value=[ref], timeout=0.5)
    assert getattr(refused.value, "code", None) == "artifact_check_timeout"
    assert time.monotonic() - started < 2  # the store would have waited 30 s per attempt


@pytest.mark.django_db(transaction=True)
def test_erasing_a_subject_deletes_its_objects_and_keeps_another_customers(tenant, s3: S3):  # noqa: F811
    from core.tenancy import tenant_scope
    from memory.erasure import erasure_execute, erasure_request_create
    from runs.conversations.messages import conversation_append
    from runs.engine.runs import run_start
    from runs.kernel.models import AgentEvent

    refs = {}
    for subject, text in (
        ("cust-s3", "only cust-s3's order history. " * 200),
        ("cust-other", "a shared price list. " * 200),
    ):
        run = run_start(tenant=tenant, workflow_name="conversation", input={}, actor="t", subject=subject).run
        for n, content in enumerate((text, "a shared price list. " * 200)):
            conversation_append(
                tenant=tenant,
                run_id=run.run_id,
                event_type="tool_result",
                client_message_id=f"t{n}",
                body={"call_id": f"c{n}", "tool": "crm", "content": content},
                actor="t",
            )
        with tenant_scope(tenant.tenant_id):
            refs[subject] = [
                e.payload["content_ref"] for e in AgentEvent.objects.filter(run=run, event_type="tool_result")
            ]
    assert len(s3.object_keys()) == 2  # cust-s3's own result, and the price list both runs hold
    request = erasure_request_create(tenant=tenant, subject_id="cust-s3", requested_by="user:compliance")
    done = erasure_execute(tenant_id=tenant.tenant_id, request_id=request.request_id)
    receipt = done.receipt or {}
    assert done.status == "completed" and receipt["clean"] is True, receipt["final_scan"]
    places = {p["place"]: p for p in receipt["places"]}
    assert places["artifacts.stored"]["before"] == 1 and places["artifacts.stored"]["after"] == 0
    digest = refs["cust-s3"][0]["digest"].removeprefix("sha256:")
    assert f"{tenant.tenant_id}/{digest[:2]}/{digest}" not in s3.object_keys() and len(s3.object_keys()) == 1
    assert artifact_get(tenant_id=tenant.tenant_id, ref=refs["cust-other"][1]).startswith(
        b"a shared price list."
    )
