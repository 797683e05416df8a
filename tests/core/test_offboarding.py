"""Tenant offboarding on real PostgreSQL and Redis: export with a digest, erase with a receipt."""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.db import connections
from django.utils import timezone
from psycopg.conninfo import make_conninfo

from console.models import AuditEntry
from core.api_auth import api_key_create
from core.artifacts import artifact_put
from core.artifacts.store import artifact_store
from core.models import ApiKey, OffboardingStatus, StoredArtifact, Tenant, TenantOffboarding
from core.offboarding import tenant_erase, tenant_indexes, tenant_scan, tenant_tables
from core.processes import current_database_url
from core.tenancy import tenant_ensure, tenant_scope
from memory.projection import memory_vector_index_ensure
from memory.services import memory_remember
from retrieval import indexes
from retrieval.services import document_index
from runs.conversations.messages import conversation_append
from runs.conversations.sessions import redis_client, session_window
from runs.engine.runs import run_start
from runs.kernel.models import AgentRun
from tests.memory.test_memory import said

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "owner"])

ROOT = Path(__file__).resolve().parents[2]


def populate(tenant: Tenant, subject: str) -> AgentRun:
    """A run with a conversation and a Redis window, memory, a document with chunks, an API key, an
    audit entry and the tenant's own HNSW indexes."""
    run = run_start(tenant=tenant, workflow_name="conversation", input={}, actor="t", subject=subject).run
    for i in range(3):
        conversation_append(
            tenant=tenant,
            run_id=run.run_id,
            event_type="user_message",
            client_message_id=f"m{i}",
            body={"content": f"hello number {i} from {subject}"},
            actor="t",
        )
    for n, content in enumerate((f"only {subject} saw this. " * 2000, "the same public price list. " * 2000)):
        conversation_append(  # long tool results: stored as artifacts, by content (shared if equal)
            tenant=tenant,
            run_id=run.run_id,
            event_type="tool_result",
            client_message_id=f"t{n}",
            body={"call_id": f"c{n}", "tool": "crm", "content": content},
            actor="t",
        )
    with tenant_scope(tenant.tenant_id):
        session_window(run=AgentRun.objects.get(run_id=run.run_id))
    memory_remember(
        tenant=tenant,
        subject_id=subject,
        namespace="profile",
        key="city",
        value=f"{subject} lives in Lisbon",
        provenance=said(run_id=str(run.run_id), seq=2),
    )
    document_index(
        tenant=tenant,
        document_id="handbook",
        source_uri="mem://handbook",
        source_version="1",
        data=b"Refunds take five days.\n\nShipping takes two days.",
        media_type="text/plain",
        acl=["group:all"],
        actor="user:test",
        wait=True,
    )
    api_key_create(tenant=tenant, name="ci", scope="write")
    AuditEntry.objects.create(actor="user:staff", tenant=tenant, action="run.cancel", target_id="x")
    assert memory_vector_index_ensure(tenant=tenant, dimensions=256)
    assert indexes.chunk_index_ensure(tenant=tenant, dimensions=256)
    return run


def owner_url() -> str:
    s = connections["owner"].settings_dict
    parts = {
        "dbname": s["NAME"],
        "user": s["USER"],
        "password": s["PASSWORD"],
        "host": s["HOST"],
        "port": s["PORT"],
    }
    return make_conninfo(**{k: str(v) for k, v in parts.items() if v})


def counts(tenant: Tenant) -> dict[str, int]:
    return {k: v for k, v in tenant_scan(tenant_id=tenant.tenant_id).items()}


@pytest.fixture
def two_tenants():
    acme = tenant_ensure(slug="acme", name="Acme")
    globex = tenant_ensure(slug="globex", name="Globex")
    populate(acme, "cust-a")
    populate(globex, "cust-g")
    yield acme, globex
    redis_client().flushdb()


def test_export_writes_every_table_of_the_tenant_and_its_digest(two_tenants, tmp_path):
    acme, globex = two_tenants
    out = tmp_path / "acme.jsonl.gz"
    call_command("tenant_export", "acme", "--out", str(out), stdout=io.StringIO())
    lines = [json.loads(line) for line in gzip.decompress(out.read_bytes()).splitlines()]
    header, end = lines[0], lines[-1]
    rows = [line for line in lines[1:-1] if "table" in line]
    blobs = [line["artifact"] for line in lines[1:-1] if "artifact" in line]
    assert header["tenant"]["slug"] == "acme"
    for table in (
        "agent_runs",
        "agent_events",
        "memory_items",
        "retrieval_documents",
        "retrieval_chunks",
        "console_audit_log",
        "langgraph_checkpoints",
        "api_keys",
    ):
        assert table in header["tables"]
    assert "embedding" in header["omitted_columns"]["retrieval_chunks"]  # metadata, not vectors
    tables = {r["table"] for r in rows}
    assert {"agent_runs", "agent_events", "memory_items", "retrieval_chunks", "console_audit_log"} <= tables
    assert all(r["row"]["tenant_id"] == str(acme.tenant_id) for r in rows)  # nothing of globex
    assert end["counts"]["agent_events"] == sum(1 for r in rows if r["table"] == "agent_events") > 3
    assert any("Lisbon" in json.dumps(r["row"]) for r in rows if r["table"] == "memory_items")
    # Its stored blobs follow, read back and checked: the two long tool results, nothing of globex's.
    assert header["format"] == "keeper.tenant_export/2" and end["counts"]["artifacts"] == len(blobs) == 2
    texts = sorted(base64.b64decode(b["base64"]).decode() for b in blobs)
    assert texts[0].startswith("only cust-a saw this.") and texts[1].startswith("the same public price")
    assert {r["row"]["digest"] for r in rows if r["table"] == "stored_artifacts"} == {
        b["digest"] for b in blobs
    }
    receipt = TenantOffboarding.objects.get(tenant_id=acme.tenant_id, status=OffboardingStatus.EXPORTED)
    assert receipt.export_digest == hashlib.sha256(out.read_bytes()).hexdigest()


def test_erase_removes_everything_of_one_tenant_and_nothing_of_another(two_tenants, tmp_path):
    acme, globex = two_tenants
    out = tmp_path / "acme.jsonl.gz"
    call_command("tenant_export", "acme", "--out", str(out), stdout=io.StringIO())
    acme_id = acme.tenant_id
    acme_indexes = tenant_indexes(tenant_id=acme_id)
    assert len(acme_indexes) == 2
    globex_before = counts(globex)
    assert globex_before["table.agent_events"] > 0 and globex_before["indexes.per_tenant"] == 2
    assert counts(acme)["redis.session_windows"] == 1

    store = artifact_store()
    assert len(store.keys_under(f"{acme_id}/")) == len(store.keys_under(f"{globex.tenant_id}/")) == 2
    # A blob stored before keys carried the tenant, which both tenants' records name: it stays for globex.
    legacy = artifact_put(tenant_id=acme_id, data=b"stored before the records", kind="tool_result")
    hexdigest = legacy["digest"].removeprefix("sha256:")
    old_key = f"{hexdigest[:2]}/{hexdigest}"
    store.write(old_key, b"stored before the records")
    for owner in (acme_id, globex.tenant_id):
        with tenant_scope(owner):
            StoredArtifact.objects.update_or_create(
                tenant_id=owner,
                digest=legacy["digest"],
                defaults={"store": store.name, "key": old_key, "size": 25},
            )
    store.delete(f"{acme_id}/{old_key}")
    globex_before = counts(globex)

    done = tenant_erase(slug="acme", confirm="acme", requested_by="user:boss")

    receipt = done.receipt
    assert receipt["artifacts_deleted"] == 2 and receipt["artifacts_kept_shared"] == 1
    assert store.keys_under(f"{acme_id}/") == [] and receipt["final_scan"]["artifacts.objects"] == 0
    assert len(store.keys_under(f"{globex.tenant_id}/")) == 2 and store.exists(old_key)
    assert done.status == OffboardingStatus.COMPLETED and receipt["clean"]
    assert sorted(receipt["indexes_dropped"]) == sorted(acme_indexes)
    assert receipt["export_sha256"] == hashlib.sha256(out.read_bytes()).hexdigest()
    assert receipt["deleted"]["agent_events"] > 3 and receipt["deleted"]["console_audit_log"] == 1
    assert receipt["deleted"]["memory_items"] == 1 and receipt["deleted"]["tenants"] == 1
    assert receipt["deleted"]["retrieval_chunks"] >= 1 and receipt["redis_keys_deleted"] == 1
    assert len(receipt["api_keys_revoked"]) == 1
    assert set(receipt["final_scan"].values()) == {0}
    # The scan covers every registry table that has a tenant_id (the rest is staff data).
    assert {f"table.{t.name}" for t in tenant_tables()} <= set(receipt["final_scan"])
    assert not Tenant.objects.filter(tenant_id=acme_id).exists()
    assert not ApiKey.objects.filter(tenant_id=acme_id).exists()
    with connections["owner"].cursor() as cursor:  # the owner sees every row, whatever the tenant
        cursor.execute("SELECT count(*) FROM agent_events WHERE tenant_id = %s", [acme_id])
        assert cursor.fetchone()[0] == 0
    assert counts(globex) == globex_before  # the other tenant is untouched
    assert len(tenant_indexes(tenant_id=globex.tenant_id)) == 2
    # The receipt survives the tenant, and a second run returns it without failing.
    again = tenant_erase(slug="acme", confirm="acme", requested_by="user:boss")
    assert again.pk == done.pk and again.receipt == receipt


def test_erase_is_refused_while_a_run_holds_a_lease_and_without_confirmation(two_tenants):
    acme, _ = two_tenants
    with pytest.raises(CommandError, match="repeat the tenant"):
        call_command("tenant_erase", "acme", "--confirm", "acm")
    with tenant_scope(acme.tenant_id):
        run = AgentRun.objects.filter(tenant_id=acme.tenant_id).first()
        AgentRun.objects.filter(pk=run.pk).update(
            lease_owner="worker-1", lease_expires_at=timezone.now() + timedelta(minutes=5)
        )
    with pytest.raises(CommandError, match="live lease"):
        call_command("tenant_erase", "acme", "--confirm", "acme")
    assert Tenant.objects.filter(slug="acme").exists()
    assert not TenantOffboarding.objects.filter(tenant_id=acme.tenant_id).exists()


def test_a_killed_erase_resumes_to_completion(two_tenants):
    acme, globex = two_tenants
    globex_before = counts(globex)
    # Another session holds a lock on memory_items: the command deletes the tables before it in its
    # transaction, then waits.
    holder = connections["owner"]
    holder.set_autocommit(False)
    with holder.cursor() as cursor:
        cursor.execute("LOCK TABLE memory_items IN SHARE MODE")  # DELETE waits; reads do not
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings.test",
        "DATABASE_URL": current_database_url(),
    }
    env["DATABASE_OWNER_URL"] = owner_url()
    proc = subprocess.Popen(
        [sys.executable, "manage.py", "tenant_erase", "acme", "--confirm", "acme"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            with connections["owner"].cursor() as cursor:
                # The command waits on the holder's row lock (pg_locks is readable by every role).
                cursor.execute("SELECT count(*) FROM pg_locks WHERE NOT granted")
                if cursor.fetchone()[0]:
                    break
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.2)
        else:
            with connections["owner"].cursor() as cursor:
                cursor.execute("SELECT wait_event_type, wait_event, state, query FROM pg_stat_activity")
                waiting = cursor.fetchall()
            proc.kill()
            pytest.fail(f"the command never waited on memory_items: {waiting} {proc.communicate()}")
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
        holder.rollback()
        holder.set_autocommit(True)
    assert proc.returncode == -signal.SIGKILL
    midway = TenantOffboarding.objects.get(tenant_id=acme.tenant_id)
    assert midway.status == OffboardingStatus.ERASING and midway.progress["api_keys_revoked"]
    assert midway.progress["deleted"] == {}  # the rows go in one transaction: all of them or none
    assert Tenant.objects.filter(slug="acme").exists()
    left = counts(acme)
    assert (
        left["table.agent_events"] > 3 and left["table.agent_runs"] == 1 and left["table.memory_items"] == 1
    )

    done = tenant_erase(slug="acme", confirm="acme", requested_by="operator")
    assert done.pk == midway.pk and done.status == OffboardingStatus.COMPLETED and done.receipt["clean"]
    assert done.receipt["deleted"]["agent_events"] == left["table.agent_events"]
    assert done.receipt["deleted"]["tenants"] == 1
    assert counts(globex) == globex_before


def test_a_run_written_to_while_its_tenant_is_erased_goes_with_it(two_tenants):
    """A worker (here a message appended, as a retry come due would commit a step) writes to one of the
    tenant's runs just after its events were deleted: the write waits for the erasure and then finds
    the run gone; the erasure completes clean, and nothing is half-deleted."""
    acme, _ = two_tenants
    with tenant_scope(acme.tenant_id):
        run_id = AgentRun.objects.get(tenant_id=acme.tenant_id).run_id
    outcome: dict[str, object] = {}

    def late_writer() -> None:
        try:
            with tenant_scope(acme.tenant_id):
                outcome["wrote"] = conversation_append(
                    tenant=acme,
                    run_id=run_id,
                    event_type="user_message",
                    client_message_id="late",
                    body={"content": "one more thing"},
                    actor="t",
                )
        except Exception as exc:  # the run (or the tenant) is gone by then
            outcome["refused"] = exc
        finally:
            connections.close_all()

    writer = threading.Thread(target=late_writer)

    def progress(line: str) -> None:
        if line.startswith("deleted agent_events:") and not writer.is_alive() and not outcome:
            writer.start()
            deadline = time.monotonic() + 10
            while writer.is_alive() and time.monotonic() < deadline:
                with connections["owner"].cursor() as cursor:
                    cursor.execute("SELECT count(*) FROM pg_locks WHERE NOT granted")
                    if cursor.fetchone()[0]:
                        return  # waiting on the erasure's locks
                time.sleep(0.05)

    done = tenant_erase(slug="acme", confirm="acme", requested_by="operator", progress=progress)
    writer.join(timeout=30)
    assert not writer.is_alive()
    assert "refused" in outcome, outcome  # the run was gone when its write could go ahead
    assert done.status == OffboardingStatus.COMPLETED and done.receipt["clean"], done.error
    assert not any(counts(acme).values())
