"""Stored artifacts: a run's state reaches only blobs its tenant stored, and the local store opens
nothing but regular files inside its root (another tenant's digest, /etc/passwd, a link out, a FIFO,
/dev/zero), within a time limit."""

from __future__ import annotations

import hashlib
import os
import stat
import time
from pathlib import Path

import pytest

from core.artifacts import (
    ArtifactMismatch,
    ArtifactRefused,
    ArtifactTooLarge,
    ArtifactUnknown,
    artifact_get,
    artifact_put,
    artifact_store,
    artifacts_check,
    artifacts_stored,
)
from core.artifacts.local import LocalArtifactStore
from core.models import StoredArtifact
from core.tenancy import tenant_scope
from tests.runs.engine.test_resume import _assert_refused, _resume, _suspended_demo

pytestmark = pytest.mark.django_db

PASSWD = Path("/etc/passwd")


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _root() -> Path:
    store = artifact_store()
    assert isinstance(store, LocalArtifactStore)
    return store.root


def _key_of(tenant, ref) -> Path:
    stored = artifacts_stored(tenant_id=tenant.tenant_id, digests=[ref["digest"]])[ref["digest"]]
    return _root() / stored.key


def test_a_reference_is_a_digest_and_reads_back_for_its_tenant_only(tenant, other_tenant):
    ref = artifact_put(tenant_id=tenant.tenant_id, data=b"acme's tool result", kind="tool_result")
    assert ref == {"digest": _digest(b"acme's tool result"), "size": 18}  # no location in it
    assert artifact_get(tenant_id=tenant.tenant_id, ref=ref) == b"acme's tool result"
    with pytest.raises(ArtifactUnknown) as refused:
        artifact_get(tenant_id=other_tenant.tenant_id, ref=ref)  # another tenant's digest: not followed
    assert refused.value.code == "artifact_unknown"
    # Keys carry the tenant: the same bytes stored by another tenant are its own object and record.
    theirs = artifact_put(tenant_id=other_tenant.tenant_id, data=b"acme's tool result", kind="tool_result")
    assert theirs == ref and _key_of(tenant, ref) != _key_of(other_tenant, theirs)
    with tenant_scope(other_tenant.tenant_id):  # row-level security: no record of acme's is visible
        assert list(StoredArtifact.objects.values_list("tenant_id", flat=True)) == [other_tenant.tenant_id]


def test_another_tenants_artifact_in_a_state_is_plain_data(tenant, other_tenant):
    ref = artifact_put(tenant_id=other_tenant.tenant_id, data=b"globex only", kind="run_state")
    check = artifacts_check(tenant_id=tenant.tenant_id, value={"attachment": ref})
    assert (check.verified, check.not_stored) == (0, 1)  # never read: acme stored no such blob


def test_a_path_in_a_runs_state_is_never_opened(tenant):
    # What an outside worker committed: a digest beside /etc/passwd's path (even its right digest).
    right = _digest(PASSWD.read_bytes())
    run = _suspended_demo(
        tenant,
        d={"digest": "sha256:" + "0" * 64, "uri": "file:///etc/passwd"},
        e={"digest": right, "uri": f"file://{PASSWD}", "size": PASSWD.stat().st_size},
    )
    event = _resume(run)
    assert event.event_type == "resume_verified", event.payload
    check = next(c for c in event.payload["checks"] if c["name"] == "artifacts_and_contracts")
    assert check["ok"] and check["detail"].startswith("0 artifact(s)"), check  # nothing was opened


def test_a_runs_own_artifact_is_checked_on_resume_and_a_changed_blob_refused(tenant):
    ref = artifact_put(tenant_id=tenant.tenant_id, data=b"the run's report", kind="run_state")
    run = _suspended_demo(tenant, report=ref)
    _key_of(tenant, ref).write_bytes(b"the run's rep0rt")  # same size, other bytes
    event = _resume(run)
    run.refresh_from_db()
    _assert_refused(run, event, "artifact_digest_mismatch")


def test_a_link_out_of_the_root_is_refused_not_followed(tenant):
    ref = artifact_put(tenant_id=tenant.tenant_id, data=b"x" * 16, kind="tool_result")
    blob = _key_of(tenant, ref)
    blob.unlink()
    blob.symlink_to(PASSWD)  # the blob itself a link to a file outside
    with pytest.raises(ArtifactRefused):
        artifact_get(tenant_id=tenant.tenant_id, ref=ref)
    # A folder on the way a link out: not followed either.
    other = artifact_put(tenant_id=tenant.tenant_id, data=b"y" * 16, kind="tool_result")
    folder = _key_of(tenant, other).parent
    for child in folder.iterdir():
        child.unlink()
    folder.rmdir()
    folder.symlink_to("/etc")
    with pytest.raises(ArtifactRefused):
        artifact_get(tenant_id=tenant.tenant_id, ref=other)


def test_a_fifo_in_the_store_is_refused_at_once(tenant):
    ref = artifact_put(tenant_id=tenant.tenant_id, data=b"z" * 32, kind="run_state")
    blob = _key_of(tenant, ref)
    blob.unlink()
    os.mkfifo(blob)  # nobody ever writes to it: an open for reading without O_NONBLOCK would block
    started = time.monotonic()
    with pytest.raises(ArtifactRefused):
        artifact_get(tenant_id=tenant.tenant_id, ref=ref)
    check_started = time.monotonic()
    with pytest.raises(ArtifactRefused):
        artifacts_check(tenant_id=tenant.tenant_id, value={"r": ref}, timeout=2)
    assert time.monotonic() - started < 2 and time.monotonic() - check_started < 2


def test_a_device_in_the_store_is_refused(tenant, tmp_path):
    ref = artifact_put(tenant_id=tenant.tenant_id, data=b"d" * 8, kind="run_state")
    blob = _key_of(tenant, ref)
    blob.unlink()
    try:
        os.mknod(blob, 0o600 | stat.S_IFCHR, os.stat("/dev/zero").st_rdev)  # a /dev/zero of its own
    except PermissionError:  # not root: /dev/zero reached through a link instead
        blob.symlink_to("/dev/zero")
    with pytest.raises(ArtifactRefused):
        artifact_get(tenant_id=tenant.tenant_id, ref=ref)
    # And by its path in a state: plain data.
    assert (
        artifacts_check(tenant_id=tenant.tenant_id, value={"z": {"digest": ref["digest"] + "0"}}).verified
        == 0
    )


def test_reads_are_bounded_by_the_record(tenant):
    ref = artifact_put(tenant_id=tenant.tenant_id, data=b"small", kind="run_state")
    with _key_of(tenant, ref).open("ab") as grown:
        grown.write(b"\0" * 1024 * 1024)  # the file grew under the store's feet
    with pytest.raises(ArtifactMismatch):
        artifact_get(tenant_id=tenant.tenant_id, ref=ref)
    with pytest.raises(ArtifactTooLarge):
        LocalArtifactStore(root=str(_root())).read(
            _key_of(tenant, ref).relative_to(_root()).as_posix(), limit=10
        )


def test_an_unregistered_kind_cannot_store(tenant):
    with pytest.raises(ValueError, match="no registered references"):
        artifact_put(tenant_id=tenant.tenant_id, data=b"orphan", kind="nobody_refers_to_this")
