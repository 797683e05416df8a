"""Replays where the other parts meet them: erasing a subject reaches the replays of their runs and
what the evaluations keep about them; a tenant's export carries its sets, rounds and replays; another
tenant sees none of them through row-level security."""

from __future__ import annotations

import gzip
import io
import json

import pytest
from django.core.management import call_command
from django.db import connection

from core.tenancy import tenant_bind, tenant_ensure
from erasure.services import erasure_execute, erasure_request_create
from runs.engine.replay_models import EvalRound, EvalSet, EvalSetRun, RunReplay
from runs.evaluation.services import eval_round_start, eval_set_create, eval_set_run_add
from runs.kernel.models import AgentEvent, AgentRun
from tests.runs.workflows.test_support_agent import _drive, _say, _start

pytestmark = pytest.mark.django_db(transaction=True)
SUBJECT = "cust-4711"


def _replayed(tenant) -> tuple[AgentRun, EvalRound]:
    original = _drive(_start(tenant, subject=SUBJECT))
    _say(tenant, original, "m-1", "Yes, please remember that I prefer email at ivo.brandt@example.com.")
    original = _drive(original)
    eval_set = eval_set_create(tenant=tenant, name=f"talks of {SUBJECT}", actor="user:engineer")
    eval_set_run_add(eval_set=eval_set, run_id=original.run_id, actor="user:engineer")
    eval_round = eval_round_start(
        actor="user:engineer",
        eval_set=eval_set,
        overrides={"prompt": f"Greet {SUBJECT} by name."},
        label=f"for {SUBJECT}",
    )
    [replay] = RunReplay.objects.filter(eval_round=eval_round)
    _drive(AgentRun.objects.get(run_id=replay.run_id))
    return original, eval_round


def test_erasing_a_subject_reaches_their_replays_and_the_evaluations_texts(tenant):
    original, eval_round = _replayed(tenant)
    [replay] = RunReplay.objects.filter(eval_round=eval_round)
    assert "ivo.brandt@example.com" in json.dumps(
        list(AgentEvent.objects.filter(run_id=replay.run_id).values_list("payload", flat=True))
    )
    request = erasure_request_create(tenant=tenant, subject_id=SUBJECT, requested_by="user:compliance")
    done = erasure_execute(tenant_id=tenant.tenant_id, request_id=request.request_id)
    assert done.receipt["clean"], done.receipt
    erased = AgentRun.objects.get(run_id=replay.run_id)
    assert erased.subject.startswith("erased:")
    assert "ivo.brandt@example.com" not in json.dumps(
        list(AgentEvent.objects.filter(run_id=replay.run_id).values_list("payload", flat=True))
    )
    assert RunReplay.objects.get(run_id=replay.run_id).overrides == {"erased": True}
    eval_round.refresh_from_db()
    assert SUBJECT not in json.dumps(eval_round.overrides) and SUBJECT not in eval_round.label
    assert not EvalSetRun.objects.filter(run_id=original.run_id).exists()
    assert SUBJECT not in EvalSet.objects.get(tenant=tenant).name


def test_the_export_carries_evaluations_and_another_tenant_sees_none(tenant, tmp_path):
    _replayed(tenant)
    out = tmp_path / "acme.jsonl.gz"
    call_command("tenant_export", "acme", "--out", str(out), stdout=io.StringIO())
    lines = [json.loads(line) for line in gzip.decompress(out.read_bytes()).splitlines()]
    tables = {line["table"] for line in lines[1:-1] if "table" in line}
    assert {"eval_sets", "eval_set_runs", "eval_rounds", "run_replays"} <= tables
    replays = [line["row"] for line in lines if line.get("table") == "agent_runs" and line["row"]["replay"]]
    assert len(replays) == 1
    globex = tenant_ensure(slug="globex", name="Globex")
    with tenant_bind(globex.tenant_id):  # row-level security as the application role
        assert not EvalSet.objects.exists() and not EvalRound.objects.exists()
        assert not RunReplay.objects.exists() and not EvalSetRun.objects.exists()
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM run_replays")
            assert cursor.fetchone()[0] == 0
