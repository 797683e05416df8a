"""Operator commands: stuck_runs, redispatch, export_history/import_history and purge."""

from __future__ import annotations

import io
import json
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from core.digests import json_digest
from core.models import Tenant
from core.tenancy import run_tenant, tenant_bind, tenant_scope
from retrieval.models import RetrievalSnapshot
from runs.engine import operation_statements
from runs.engine.runs import run_resume, run_start, run_suspend
from runs.engine.steps import run_advance
from runs.kernel import apply
from runs.kernel import moves as m
from runs.kernel.models import AgentEvent, AgentRun, Approval, Summary, ToolOperation
from runs.operator import history, redispatch
from runs.operator.history import history_digest

pytestmark = pytest.mark.django_db


def _start(tenant: Tenant, n: int = 2) -> AgentRun:
    return run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": n}, actor="test").run


def _call(*args: str) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def _age(run: AgentRun, **fields: Any) -> None:
    """Make the run look as if nothing happened to it for an hour."""
    old = timezone.now() - timedelta(hours=1)
    AgentRun.objects.filter(run_id=run.run_id).update(updated_at=old, **fields)


# --- stuck_runs -------------------------------------------------------------------------------


def test_stuck_runs_lists_runs_nobody_moves_with_the_reason(tenant, other_tenant):
    never_woken = _start(tenant)
    _age(never_woken)
    expired = _start(tenant)
    _age(
        expired, lease_owner="w-dead", lease_expires_at=timezone.now() - timedelta(minutes=30), lease_epoch=1
    )
    resume = _start(tenant)
    run_suspend(run_id=resume.run_id, actor="test", reason="needs_person")
    run_resume(run_id=resume.run_id, actor="user:sam")
    AgentRun.objects.filter(run_id=resume.run_id).update(
        resume_requested_at=timezone.now() - timedelta(hours=2)
    )
    fresh = _start(tenant)  # just started: the sweep has not had its chance yet
    held = _start(tenant)
    _age(held, lease_owner="w-alive", lease_expires_at=timezone.now() + timedelta(minutes=5), lease_epoch=1)
    elsewhere = _start(other_tenant)
    _age(elsewhere)

    rows = json.loads(_call("stuck_runs", "--tenant", "acme", "--json"))

    by_id = {row["run_id"]: row for row in rows}
    assert set(by_id) == {str(never_woken.run_id), str(expired.run_id), str(resume.run_id)}
    assert str(fresh.run_id) not in by_id and str(held.run_id) not in by_id
    assert "never re-dispatched" in by_id[str(never_woken.run_id)]["reasons"][0]
    assert "lease of w-dead expired" in by_id[str(expired.run_id)]["reasons"][0]
    assert "resume requested by user:sam" in by_id[str(resume.run_id)]["reasons"][0]
    assert by_id[str(expired.run_id)]["lease_owner"] == "w-dead"
    assert all(row["tenant"] == "acme" and row["dispatchable"] for row in rows)


def test_stuck_runs_reports_operations_in_doubt(tenant):
    run = _start(tenant)
    _operation(run, status="unknown")
    [row] = json.loads(_call("stuck_runs", "--json"))
    assert row["run_id"] == str(run.run_id)
    assert any("operation refund:o-1 unknown" in reason for reason in row["reasons"])


def test_stuck_runs_prints_a_table(tenant):
    run = _start(tenant)
    _age(run)
    text = _call("stuck_runs")
    assert "RUN" in text and "WHY" in text and str(run.run_id) in text and "1 stuck run(s)" in text
    AgentRun.objects.filter(run_id=run.run_id).update(updated_at=timezone.now())
    assert "no stuck runs" in _call("stuck_runs")


@pytest.mark.parametrize("args", [["--tenant", "nope"], ["--older-than", "-5"]])
def test_stuck_runs_refuses_bad_arguments_with_exit_code_2(tenant, args):
    with pytest.raises(CommandError) as excinfo:
        _call("stuck_runs", *args)
    assert excinfo.value.returncode == 2


# --- redispatch -------------------------------------------------------------------------------


@pytest.fixture
def sent(monkeypatch) -> list[uuid.UUID]:
    calls: list[uuid.UUID] = []

    def fake_enqueue(*, run_id: uuid.UUID, countdown: float | None = None) -> bool:
        calls.append(run_id)
        return True

    monkeypatch.setattr(redispatch, "run_enqueue", fake_enqueue)
    return calls


def test_redispatch_sends_wake_ups_to_the_named_runs_without_changing_them(tenant, sent):
    run = _start(tenant)
    before = AgentRun.objects.values().get(run_id=run.run_id)
    text = _call("redispatch", "--run", str(run.run_id), str(run.run_id))
    assert sent == [run.run_id] and "1 wake-up(s) sent" in text
    assert AgentRun.objects.values().get(run_id=run.run_id) == before


def test_redispatch_stuck_and_dry_run(tenant, sent):
    stuck, fresh = _start(tenant), _start(tenant)
    _age(stuck)
    listed = json.loads(_call("redispatch", "--stuck", "--dry-run", "--json"))
    assert listed == {"run_ids": [str(stuck.run_id)], "sent": 0, "dry_run": True} and sent == []
    assert "1 wake-up(s) sent" in _call("redispatch", "--stuck")
    assert sent == [stuck.run_id] and fresh.run_id not in sent


@pytest.mark.parametrize("args", [["--run", "not-a-uuid"], ["--run", str(uuid.UUID(int=7))], []])
def test_redispatch_refuses_unknown_runs_and_missing_targets(tenant, sent, args):
    with pytest.raises(CommandError):
        _call("redispatch", *args)
    assert sent == []


def test_redispatch_refuses_a_run_of_another_tenant(tenant, other_tenant, sent):
    run = _start(other_tenant)
    with pytest.raises(CommandError, match="no run"):
        _call("redispatch", "--run", str(run.run_id), "--tenant", "acme")


# --- export / import --------------------------------------------------------------------------


def _operation(run: AgentRun, *, status: str = "succeeded") -> None:
    operation_statements.operation_prepare_once(
        tenant_id=run.tenant_id,
        operation_id="refund:o-1",
        run_id=run.run_id,
        step_id="tick",
        tool_name="refund",
        tool_contract_version="1",
        request_digest="sha256:req",
        actor="w",
    )
    operation_statements.operation_transition(
        tenant_id=run.tenant_id, operation_id="refund:o-1", to_status="started", actor="w"
    )
    operation_statements.operation_transition(
        tenant_id=run.tenant_id,
        operation_id="refund:o-1",
        to_status=status,
        actor="w",
        external_ref="re_1" if status == "succeeded" else None,
    )


def _rich_run(tenant: Tenant) -> AgentRun:
    """A finished run with events, an operation, an approval, a summary and a retrieval snapshot."""
    run = _start(tenant, n=2)
    for _ in range(6):
        run_advance(run_id=run.run_id, worker_id="w")
    _operation(run)
    Approval.objects.create(
        tenant=tenant,
        run=run,
        step_id="tick",
        request={"amount": 5},
        request_digest=json_digest({"amount": 5}),
        reasons=["big"],
        status="approved",
        expires_at=timezone.now() + timedelta(days=1),
        decided_by="user:sam",
        decided_at=timezone.now(),
        note="ok",
    )
    Summary.objects.create(
        tenant=tenant,
        run=run,
        covers_from_seq=1,
        covers_to_seq=2,
        source_digest="sha256:src",
        compactor={"model": "x"},
        facts=["f"],
        carry={"ops": ["refund:o-1"]},
        text="summary",
        token_count=3,
    )
    with tenant_scope(tenant.tenant_id):
        RetrievalSnapshot.objects.create(
            snapshot_id=f"rs_{uuid.uuid4().hex}",
            tenant=tenant,
            run_id=run.run_id,
            query_digest="sha256:q",
            index_version="iv1",
            acl_principal=f"tenant:{tenant.tenant_id}/user:alice",
            k=3,
            hits=[{"chunk_id": "doc:p1:c1", "score": 0.5}],
        )
    return AgentRun.objects.get(run_id=run.run_id)


_CHANGED_ON_IMPORT = {
    "run_id",
    "lease_owner",
    "lease_expires_at",
    "idempotency_key",
    "parent_run_id",
    "superseded_by_id",
    "fork_expires_at",
}


def _comparable(document: dict[str, Any]) -> dict[str, Any]:
    strip = {
        "run": _CHANGED_ON_IMPORT,
        "approvals": {"approval_id"},
        "summaries": {"summary_id"},
        "retrieval_snapshots": {"snapshot_id", "run_id", "acl_principal"},
    }
    out: dict[str, Any] = {}
    for section in ("events", "operations", "approvals", "summaries", "retrieval_snapshots", "run"):
        rows = document[section] if section != "run" else [document["run"]]
        out[section] = [{k: v for k, v in row.items() if k not in strip.get(section, set())} for row in rows]
    return out


def test_a_run_exported_and_imported_into_another_tenant_is_the_same_history_and_fenced(
    tenant, tmp_path: Path
):
    run = _rich_run(tenant)
    assert run.status == "completed" and run.state_revision >= 4
    path = tmp_path / "run.json"
    _call("export_history", str(run.run_id), "--output", str(path))
    exported = json.loads(path.read_text())
    assert exported["format_version"] == 1 and exported["digest"] == history_digest(exported)
    # Exported again later: the same content, the same digest (the export's time is not content).
    again = history.run_history_document(run_id=run.run_id)
    assert again["exported_at"] != exported["exported_at"] and again["digest"] == exported["digest"]
    assert [e["seq"] for e in exported["events"]] == list(range(1, run.state_revision + 1))
    assert len(exported["operations"]) == len(exported["approvals"]) == len(exported["summaries"]) == 1
    assert len(exported["retrieval_snapshots"]) == 1
    assert exported["operations"][0]["history"][-1]["status"] == "succeeded"

    result = json.loads(_call("import_history", str(path), "--tenant", "debug-copy", "--json"))

    copy_id = uuid.UUID(result["run_id"])
    assert copy_id != run.run_id and result["tenant"] == "debug-copy"
    assert run_tenant(copy_id) == Tenant.objects.get(slug="debug-copy").tenant_id
    copy_tenant = run_tenant(copy_id)
    assert copy_tenant is not None
    with tenant_bind(copy_tenant):  # row-level security: the copy is the other tenant's
        copy = AgentRun.objects.select_related("tenant").get(run_id=copy_id)
        assert copy.tenant.slug == "debug-copy" and copy.status == "completed"
        assert copy.imported and copy.lease_owner is None  # a state, not a sentinel lease owner
        assert (
            apply(
                m.LeaseTaken(
                    run_id=copy_id,
                    tenant_id=copy_tenant,
                    owner="w2",
                    ttl=30,
                )
            )
            is None
        )
    reexported = history.run_history_document(run_id=copy_id)
    assert _comparable(reexported) == _comparable(exported)
    assert reexported["retrieval_snapshots"][0]["hits"] == exported["retrieval_snapshots"][0]["hits"]
    # The original is untouched.
    assert AgentEvent.objects.filter(run_id=run.run_id).count() == run.state_revision


def test_an_imported_running_run_is_never_taken_by_a_worker_or_the_sweep(tenant, tmp_path: Path):
    run = _start(tenant)
    _age(run)
    path = tmp_path / "run.json"
    path.write_text(json.dumps(history.run_history_document(run_id=run.run_id)))
    AgentRun.objects.filter(run_id=run.run_id).update(
        status="cancelled", next_step=None
    )  # only the copy runs
    copy_id = uuid.UUID(
        json.loads(_call("import_history", str(path), "--tenant", "debug", "--json"))["run_id"]
    )
    copy_tenant = run_tenant(copy_id)
    assert copy_tenant is not None
    with tenant_bind(copy_tenant):  # row-level security: the copy is the other tenant's
        assert AgentRun.objects.get(run_id=copy_id).status == "running"
        assert (
            apply(
                m.LeaseTaken(
                    run_id=copy_id,
                    tenant_id=copy_tenant,
                    owner="w",
                    ttl=30,
                )
            )
            is None
        )
    assert copy_id not in apply(
        m.RunsRedispatched(
            grace=0,
            limit=100,
        )
    )
    assert run_advance(run_id=copy_id, worker_id="w").outcome != "committed"
    assert json.loads(_call("stuck_runs", "--json")) == []


def test_an_imported_run_refuses_resume_cancel_and_messages_with_a_reason_and_never_runs(
    tenant, tmp_path: Path
):
    from core.errors import ApplicationError
    from runs.conversations.messages import conversation_append
    from runs.engine.forks import run_fork, run_rewind
    from runs.engine.runs import run_cancel, run_resume, run_suspend

    run = _start(tenant)
    run_suspend(run_id=run.run_id, actor="test", reason="manual_review")
    path = tmp_path / "run.json"
    path.write_text(json.dumps(history.run_history_document(run_id=run.run_id)))
    copy_id = uuid.UUID(
        json.loads(_call("import_history", str(path), "--tenant", "debug", "--json"))["run_id"]
    )
    copy_tenant = run_tenant(copy_id)
    assert copy_tenant is not None
    with tenant_bind(copy_tenant):  # row-level security: the copy is the other tenant's
        copy = AgentRun.objects.get(run_id=copy_id)
        attempts = {
            "resume": lambda: run_resume(run_id=copy_id, actor="user:ops"),
            "cancel": lambda: run_cancel(run_id=copy_id, actor="user:ops"),
            "rewind": lambda: run_rewind(run_id=copy_id, to_seq=1, actor="user:ops"),
        }
        for name, attempt in attempts.items():
            with pytest.raises(ApplicationError) as refused:
                attempt()
            assert refused.value.code == "run_imported" and "imported" in refused.value.message, name
        with pytest.raises(ApplicationError):
            conversation_append(
                tenant=copy.tenant,
                run_id=copy_id,
                event_type="user_message",
                client_message_id="m",
                body={"content": "hi"},
                actor="user:x",
            )
        after = AgentRun.objects.get(run_id=copy_id)
        assert (after.status, after.state_revision, after.imported) == (
            "suspended",
            copy.state_revision,
            True,
        )
        assert (
            apply(
                m.LeaseTaken(
                    run_id=copy_id,
                    tenant_id=copy_tenant,
                    owner="w",
                    ttl=30,
                )
            )
            is None
        )
        fork = run_fork(run_id=copy_id, at_seq=1, actor="user:ops")  # a fork of the copy is a run of its own
        assert (
            not fork.imported
            and apply(
                m.LeaseTaken(
                    run_id=fork.run_id,
                    tenant_id=fork.tenant_id,
                    owner="w",
                    ttl=30,
                )
            )
            is not None
        )


def test_import_with_keep_ids_refuses_a_run_that_already_exists(tenant, tmp_path: Path):
    run = _start(tenant)
    path = tmp_path / "run.json"
    path.write_text(json.dumps(history.run_history_document(run_id=run.run_id)))
    with pytest.raises(CommandError, match="already exists"):
        _call("import_history", str(path), "--keep-ids", "--tenant", "debug")
    assert not Tenant.objects.filter(slug="debug").exists()


def _tampered(document: dict[str, Any], change: str) -> dict[str, Any]:
    if change == "version":
        document["format_version"] = 99
    elif change == "content":
        document["events"][0]["actor"] = "mallory"
    elif change == "gap":
        del document["events"][1]
        document["digest"] = history_digest(document)
    elif change == "state":
        document["events"][0]["state"]["n"] = 99
        document["digest"] = history_digest(document)
    return document


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("version", "format version 99"),
        ("content", "digest mismatch"),
        ("gap", "not continuous"),
        ("state", "does not match its state digest"),
    ],
)
def test_a_bad_file_is_refused_by_name_and_nothing_is_written(tenant, tmp_path: Path, change, message):
    run = _start(tenant)
    run_advance(run_id=run.run_id, worker_id="w")
    run_advance(run_id=run.run_id, worker_id="w")
    path = tmp_path / "run.json"
    path.write_text(json.dumps(_tampered(history.run_history_document(run_id=run.run_id), change)))
    runs_before = AgentRun.objects.count()
    with pytest.raises(CommandError, match=message):
        _call("import_history", str(path), "--tenant", "debug")
    assert AgentRun.objects.count() == runs_before and not Tenant.objects.filter(slug="debug").exists()


def test_import_refuses_a_file_that_is_not_json_or_missing(tmp_path: Path, db):
    path = tmp_path / "bad.json"
    path.write_text("{not json")
    with pytest.raises(CommandError, match="is not JSON"):
        _call("import_history", str(path))
    with pytest.raises(CommandError, match="cannot read"):
        _call("import_history", str(tmp_path / "missing.json"))
    path.write_text("[1, 2]")
    with pytest.raises(CommandError, match="not a JSON object"):
        _call("import_history", str(path))


def test_a_collision_with_existing_rows_rolls_everything_back(tenant, tmp_path: Path):
    run = _rich_run(tenant)
    path = tmp_path / "run.json"
    path.write_text(json.dumps(history.run_history_document(run_id=run.run_id)))
    runs_before, events_before = AgentRun.objects.count(), AgentEvent.objects.count()
    with pytest.raises(CommandError, match="operation ids are unique per tenant"):
        _call("import_history", str(path), "--tenant", "acme")  # same tenant: refund:o-1 exists
    assert (AgentRun.objects.count(), AgentEvent.objects.count()) == (runs_before, events_before)


def test_export_history_refuses_an_unknown_run(db):
    with pytest.raises(CommandError, match="no run"):
        _call("export_history", str(uuid.uuid4()))
    with pytest.raises(CommandError, match="no run"):
        _call("export_history", "nope")


# --- purge ------------------------------------------------------------------------------------


def _finished(tenant: Tenant, *, days_ago: int, status: str = "completed") -> AgentRun:
    run = _start(tenant)
    AgentRun.objects.filter(run_id=run.run_id).update(
        status=status, next_step=None, updated_at=timezone.now() - timedelta(days=days_ago)
    )
    return run


def test_purge_deletes_old_finished_runs_with_their_history_and_nothing_else(tenant, monkeypatch):
    old = _rich_run(tenant)
    AgentRun.objects.filter(run_id=old.run_id).update(updated_at=timezone.now() - timedelta(days=100))
    old_failed = _finished(tenant, days_ago=200, status="failed")
    recent = _finished(tenant, days_ago=1)
    active = _start(tenant)
    _age(active)
    AgentRun.objects.filter(run_id=active.run_id).update(updated_at=timezone.now() - timedelta(days=365))
    suspended = _start(tenant)
    run_suspend(run_id=suspended.run_id, actor="t", reason="x")
    AgentRun.objects.filter(run_id=suspended.run_id).update(updated_at=timezone.now() - timedelta(days=365))

    counted = json.loads(_call("purge", "--older-than", "30", "--dry-run", "--json"))
    assert counted["runs"] == 2 and counted["operations"] == 1 and counted["dry_run"] is True
    assert AgentRun.objects.filter(run_id=old.run_id).exists()

    text = _call("purge", "--older-than", "30", "--yes", "--batch-size", "1")

    assert "batch 1:" in text and "batch 2:" in text and "2 run(s) deleted" in text
    assert "redis windows: 0" in text
    assert not AgentRun.objects.filter(run_id__in=[old.run_id, old_failed.run_id]).exists()
    assert not AgentEvent.objects.filter(run_id=old.run_id).exists()
    assert not ToolOperation.objects.filter(run_id=old.run_id).exists()
    assert not Approval.objects.filter(run_id=old.run_id).exists()
    assert not Summary.objects.filter(run_id=old.run_id).exists()
    assert set(AgentRun.objects.values_list("run_id", flat=True)) == {
        recent.run_id,
        active.run_id,
        suspended.run_id,
    }


def test_purge_keeps_runs_with_forks_or_operations_in_doubt_and_filters_by_status_and_tenant(
    tenant, other_tenant
):
    in_doubt = _start(tenant)
    _operation(in_doubt, status="unknown")
    AgentRun.objects.filter(run_id=in_doubt.run_id).update(
        status="failed", next_step=None, updated_at=timezone.now() - timedelta(days=100)
    )
    cancelled = _finished(tenant, days_ago=100, status="cancelled")
    elsewhere = _finished(other_tenant, days_ago=100)
    completed = _finished(tenant, days_ago=100)

    report = json.loads(
        _call(
            "purge",
            "--older-than",
            "30",
            "--status",
            "completed,failed",
            "--tenant",
            "acme",
            "--yes",
            "--json",
        )
    )

    assert report["runs"] == 1 and report["kept_open_operations"] == 1
    assert not AgentRun.objects.filter(run_id=completed.run_id).exists()
    assert AgentRun.objects.filter(run_id__in=[in_doubt.run_id, cancelled.run_id]).count() == 2
    with tenant_bind(other_tenant.tenant_id):
        assert AgentRun.objects.filter(run_id=elsewhere.run_id).exists()


def test_purge_takes_a_parent_only_after_its_forks(tenant):
    parent = _finished(tenant, days_ago=100)
    child = _start(tenant)
    AgentRun.objects.filter(run_id=child.run_id).update(
        parent_run=parent.run_id,
        fork_seq=1,
        status="completed",
        next_step=None,
        updated_at=timezone.now() - timedelta(days=100),
    )
    report = json.loads(_call("purge", "--older-than", "30", "--yes", "--json"))
    assert report["runs"] == 2 and report["batches"] == 2
    assert not AgentRun.objects.filter(run_id__in=[parent.run_id, child.run_id]).exists()


def test_purge_refuses_without_yes_when_there_is_no_terminal(tenant, monkeypatch):
    old = _finished(tenant, days_ago=100)
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    with pytest.raises(CommandError, match="without --yes"):
        _call("purge", "--older-than", "30")
    assert AgentRun.objects.filter(run_id=old.run_id).exists()


@pytest.mark.parametrize(
    "args",
    [
        ["--status", "running"],
        ["--status", "completed,suspended"],
        ["--older-than", "-1"],
        ["--tenant", "nope"],
    ],
)
def test_purge_refuses_bad_arguments(tenant, args):
    with pytest.raises(CommandError):
        _call("purge", "--yes", *args)


@pytest.mark.parametrize("number", ["1e20", "1e400", "inf", "nan", "ten"])
def test_out_of_range_numbers_are_an_error_not_a_traceback(tenant, number):
    """Not OverflowError and ValueError tracebacks from deep inside the commands."""
    for command, option in (
        ("stuck_runs", "--older-than"),
        ("purge", "--older-than"),
        ("purge", "--snapshots-older-than"),
    ):
        with pytest.raises(CommandError, match=f"argument {option}"):
            _call(command, option, number, *(["--dry-run"] if command == "purge" else []))


def test_purge_deletes_old_snapshots_inside_each_tenant_scope(tenant, other_tenant):
    def snapshot(t: Tenant, days_ago: int) -> str:
        sid = f"rs_{uuid.uuid4().hex}"
        with tenant_scope(t.tenant_id):
            RetrievalSnapshot.objects.create(
                snapshot_id=sid, tenant=t, query_digest="q", index_version="i", acl_principal="p", k=1
            )
            RetrievalSnapshot.objects.filter(pk=sid).update(
                created_at=timezone.now() - timedelta(days=days_ago)
            )
        return sid

    old_a, old_b, new_a = snapshot(tenant, 40), snapshot(other_tenant, 40), snapshot(tenant, 1)
    assert json.loads(_call("purge", "--snapshots-older-than", "30", "--dry-run", "--json"))["snapshots"] == 2
    report = json.loads(_call("purge", "--snapshots-older-than", "30", "--yes", "--json"))
    assert report["snapshots"] == 2
    with tenant_scope(tenant.tenant_id):
        assert set(RetrievalSnapshot.objects.values_list("snapshot_id", flat=True)) == {new_a}
    with tenant_scope(other_tenant.tenant_id):
        assert not RetrievalSnapshot.objects.filter(snapshot_id__in=[old_a, old_b]).exists()


def test_purge_expires_orphan_forks(tenant):
    run = _start(tenant)
    AgentRun.objects.filter(run_id=run.run_id).update(
        status="suspended",
        suspend_reason="fork_not_started",
        fork_expires_at=timezone.now() - timedelta(days=1),
    )
    assert json.loads(_call("purge", "--dry-run", "--json"))["forks_expired"] == 1
    assert json.loads(_call("purge", "--yes", "--json"))["forks_expired"] == 1
    assert AgentRun.objects.get(run_id=run.run_id).status == "cancelled"


def test_stuck_runs_names_a_wake_up_time_long_past(tenant):
    run = _start(tenant)
    _age(run, wake_at=timezone.now() - timedelta(minutes=20))
    [row] = json.loads(_call("stuck_runs", "--older-than", "60", "--json"))
    assert row["run_id"] == str(run.run_id) and "wake_at passed" in row["reasons"][0]


def test_purge_deletes_the_runs_redis_windows_too(tenant):
    """A purged conversation's window (its last messages, a customer's email among them) must not stay
    in Redis for 7 days, where no erasure looks once the run is gone."""
    from runs.conversations.messages import conversation_append
    from runs.conversations.sessions import redis_client, session_key

    runs = []
    for subject in ("", "cust-purged"):
        run = run_start(tenant=tenant, workflow_name="conversation", input={}, actor="t", subject=subject).run
        conversation_append(
            tenant=tenant,
            run_id=run.run_id,
            event_type="user_message",
            client_message_id="m1",
            body={"content": "write to zed.quixote@example.org"},
            actor="t",
        )
        runs.append(run)
    kept = _finished(tenant, days_ago=1)
    redis_client().rpush(session_key(kept), b"{}")
    keys = [session_key(run) for run in runs]
    assert all(redis_client().exists(k) for k in keys)
    AgentRun.objects.filter(run_id__in=[r.run_id for r in runs]).update(
        status="cancelled", next_step=None, updated_at=timezone.now() - timedelta(days=40)
    )
    report = json.loads(_call("purge", "--older-than", "30", "--yes", "--json"))
    assert report["runs"] == 2 and report["session_windows"] == 2
    assert not any(redis_client().exists(k) for k in keys)
    assert redis_client().exists(session_key(kept))  # a run kept keeps its window


def test_a_file_exported_before_the_digest_left_out_its_time_still_imports(tenant, tmp_path):
    from core.digests import json_digest

    run = _rich_run(tenant)
    document = history.run_history_document(run_id=run.run_id)
    document["digest"] = json_digest({k: v for k, v in document.items() if k != "digest"})  # the old rule
    path = tmp_path / "old.json"
    path.write_text(json.dumps(document))
    _call("import_history", str(path), "--tenant", "elsewhere")
    document["events"][0]["payload"] = {"edited": True}
    path.write_text(json.dumps(document))
    with pytest.raises(CommandError, match="digest mismatch"):
        _call("import_history", str(path))
