"""Evaluation sets run again from the management command, the REST API and with a model behind
core.chat's client; the overrides a request may give are checked before anything is stored."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from rest_framework.test import APIClient

from console.demo import demo_load
from core.errors import InvalidInput
from core.models import Tenant
from core.tenancy import tenant_bind, tenant_ensure
from runs.engine.replay_models import EvalRound, EvalSet, RunReplay
from runs.evaluation.overrides import overrides_from_pairs, overrides_parse
from runs.evaluation.selectors import replay_compare
from runs.evaluation.services import replay_feed, replay_start
from runs.kernel.models import AgentEvent, AgentRun
from tests.runs.workflows.test_support_agent import ScriptedChat, _drive, _say, _start

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize(
    ("overrides", "code"),
    [
        ("not an object", "invalid_overrides"),
        ({"model": "x"}, "invalid_overrides"),
        ({"backends": {"embedder": "hashing"}}, "unknown_part"),
        ({"backends": {"support_model": "gpt-5"}}, "unknown_choice"),
        ({"backends": {"support_model": {"choice": "model", "options": {"base_url": "http://10.0.0.1/v1"}}}}, "model_endpoint_not_allowed"),
        ({"backends": {"support_model": {"choice": "model", "options": {"api_key": "sk-1"}}}}, "invalid_overrides"),
        ({"backends": {"support_model": {"choice": "rules", "options": {"model": "m"}}}}, "invalid_overrides"),
        ({"prompt": ""}, "invalid_overrides"),
        ({"tools": {"lookup_order": {"result": 1}}}, "invalid_overrides"),
        ({"prompt": "x" * 300_000}, "overrides_too_large"),
    ],
)  # fmt: skip
def test_overrides_outside_the_contract_are_refused_with_a_reason(overrides, code, settings):
    settings.KEEPER_REPLAY_MODEL_URLS = ["http://127.0.0.1:9/v1"]
    with pytest.raises(InvalidInput) as refused:
        overrides_parse(overrides)
    assert refused.value.code == code


def test_command_pairs_name_the_support_model_and_its_options():
    assert overrides_from_pairs(
        ["model=model", "model.model=m-2", "prompt=Be terse", "compactor=extractive"]
    ) == {
        "backends": {
            "support_model": {"choice": "model", "options": {"model": "m-2"}},
            "compactor": {"choice": "extractive"},
        },
        "prompt": "Be terse",
    }
    with pytest.raises(InvalidInput):
        overrides_from_pairs(["model.timeout=soon"])


def test_a_replay_asks_another_model_through_core_chat_and_stores_no_key(tenant, sandbox, settings):
    chat = ScriptedChat()
    try:
        settings.KEEPER_REPLAY_MODEL_URLS = [chat.url]
        sandbox.order("o-400")
        original = _drive(_start(tenant, subject="cust-11"))
        _say(tenant, original, "m-1", "Where is my order o-400?")
        original = _drive(original)
        chat.script.extend(
            [{"tool": "lookup_order", "arguments": {"order_id": "o-400"}}, {"reply": "It is delivered."}]
        )
        options = {"base_url": chat.url, "model": "small-model"}
        replay = _drive(
            replay_start(
                run_id=original.run_id,
                actor="test",
                overrides={"backends": {"support_model": {"choice": "model", "options": options}}},
            )
        )
    finally:
        chat.server.shutdown()
        chat.server.server_close()
    assert [r["body"]["model"] for r in chat.requests] == ["small-model", "small-model"]
    [reply] = AgentEvent.objects.filter(run_id=replay.run_id, event_type="assistant_message")
    assert (reply.payload["content"], reply.payload["responder"]) == ("It is delivered.", "model-v1")
    stored = RunReplay.objects.get(run_id=replay.run_id).overrides
    assert "api_key" not in json.dumps(stored)
    compared = replay_compare(replay=RunReplay.objects.get(run_id=replay.run_id))
    assert (
        compared is not None
        and not compared.same_moves
        and compared.replay.outcome == "suspended: awaiting_input"
    )


class _StaleFirst:
    """AgentRun for the comparison, whose first read returns the replay's run as it was before it was
    fed: a worker moving the run between the comparison's two reads."""

    def __init__(self, stale: AgentRun) -> None:
        self.stale, self.reads = stale, 0
        self.objects = self

    def filter(self, **kwargs: object) -> list[AgentRun]:
        self.reads += 1
        rows = list(AgentRun.objects.filter(**kwargs))
        if self.reads == 1:
            rows = [self.stale if r.run_id == self.stale.run_id else r for r in rows]
        return rows


def test_a_replay_fed_between_the_comparisons_reads_is_not_settled(tenant, sandbox, monkeypatch):
    sandbox.order("o-401")
    original = _drive(_start(tenant, subject="cust-13"))
    _say(tenant, original, "m-1", "Where is my order o-401?")
    original = _drive(original)
    monkeypatch.setattr("runs.engine.replays._after_suspend", [])  # the evaluation feeds it below
    replay = _drive(replay_start(run_id=original.run_id, actor="test"))
    assert (replay.status, replay.suspend_reason) == ("suspended", "awaiting_input")
    stored = RunReplay.objects.get(run_id=replay.run_id)
    waiting = replay_compare(replay=stored)
    assert waiting is not None and waiting.unfed == 1 and not waiting.settled
    assert replay_feed(replay.run_id)
    reads = _StaleFirst(replay)
    monkeypatch.setattr("runs.evaluation.selectors.AgentRun", reads)
    compared = replay_compare(replay=stored)
    assert reads.reads == 2  # the first read's run was behind its events: read again
    assert compared is not None and compared.unfed == 0 and compared.replay.resume_requested
    assert not compared.settled


def test_the_api_keeps_a_set_runs_it_again_and_answers_bad_input_with_a_reason(tenant, sandbox, api):
    sandbox.order("o-401")
    original = _drive(_start(tenant, subject="cust-12"))
    _say(tenant, original, "m-1", "Order o-401 arrived broken, refund please")
    original = _drive(original)
    made = api.post("/api/v1/eval-sets/", {"tenant": "acme", "name": "refund talks"}, format="json")
    assert made.status_code == 201, made.content
    set_id = made.json()["set_id"]
    again = api.post("/api/v1/eval-sets/", {"tenant": "acme", "name": "refund talks"}, format="json")
    assert (again.status_code, again.json()["error"]["code"]) == (409, "eval_set_name_taken")
    kept = api.post(f"/api/v1/eval-sets/{set_id}/runs", {"run_id": str(original.run_id)}, format="json")
    assert kept.status_code == 201 and kept.json()["at_seq"] == 1
    bad = api.post(
        f"/api/v1/eval-sets/{set_id}/rounds",
        {"overrides": {"backends": {"support_model": "gpt-9"}}},
        format="json",
    )
    assert (bad.status_code, bad.json()["error"]["code"]) == (422, "unknown_choice")
    assert not EvalRound.objects.exists()
    beyond = api.post(f"/api/v1/runs/{original.run_id}/replay", {"at_seq": 999}, format="json")
    assert (beyond.status_code, beyond.json()["error"]["code"]) == (422, "invalid_seq")
    started = api.post(
        f"/api/v1/eval-sets/{set_id}/rounds",
        {"overrides": {"backends": {"support_model": "rules-no-refunds"}}, "label": "no refunds"},
        format="json",
    )
    assert started.status_code == 201, started.content
    round_id = started.json()["round_id"]
    [row] = started.json()["rows"]
    _drive(AgentRun.objects.get(run_id=row["replay_run_id"]))
    table = api.get(f"/api/v1/eval-rounds/{round_id}/").json()
    assert table["settled"] and table["totals"]["replays"] == 1 and table["totals"]["same_moves"] == 0
    assert table["rows"][0]["original"]["outcome"] == "suspended: approval_required"
    assert table["rows"][0]["replay"]["outcome"] == "suspended: awaiting_input"
    compared = api.get(f"/api/v1/runs/{row['replay_run_id']}/replay-comparison").json()["comparison"]
    assert compared["diverged_at_seq"]["replay"] is not None
    of_replay = api.post(f"/api/v1/runs/{row['replay_run_id']}/replay", {}, format="json")
    assert (of_replay.status_code, of_replay.json()["error"]["code"]) == (422, "replay_of_replay")
    not_replay = api.get(f"/api/v1/runs/{original.run_id}/replay-comparison")
    assert (not_replay.status_code, not_replay.json()["error"]["code"]) == (404, "not_a_replay")
    # Another tenant's key sees neither the set nor the round.
    globex = tenant_ensure(slug="globex", name="Globex")
    from core.api_auth import api_key_create

    with tenant_bind(globex.tenant_id):
        key = api_key_create(tenant=globex, name="other", scope="write").plaintext
    other = APIClient()
    other.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    assert other.get(f"/api/v1/eval-rounds/{round_id}/").status_code == 404
    assert other.post(f"/api/v1/eval-sets/{set_id}/rounds", {}, format="json").status_code == 404
    assert other.get("/api/v1/eval-sets/").json() == []
    paths = api.get("/api/schema/?format=json").json()["paths"]
    assert {"/api/v1/eval-sets/", "/api/v1/runs/{run_id}/replay", "/api/v1/eval-rounds/{round_id}/"} <= set(
        paths
    )


@pytest.mark.slow
def test_the_demo_conversations_compared_under_two_models_from_the_command(live_server, settings, tmp_path):
    settings.KEEPER_SANDBOX_URL = live_server.url + "/sandbox"
    settings.KEEPER_PAYMENTS_TIMEOUT = 1.0
    result = demo_load(data_dir=tmp_path)
    acme = Tenant.objects.get(slug="acme")
    # The conversation from its start; the refunds from seq 2, after they looked their order up (a
    # replay reuses the order the original read instead of reading today's, already refunded).
    demo_runs = [
        result.runs["support_agent"],
        result.runs["awaiting_approval"] + "@2",
        result.runs["unknown_operation"] + "@2",
    ]
    out, err = io.StringIO(), io.StringIO()
    call_command("evaluate", "demo conversations", "--tenant", "acme", "--create",
                 *(a for r in demo_runs for a in ("--add", r)), stdout=out, stderr=err)  # fmt: skip
    tables = {}
    for model in ("rules", "rules-no-refunds"):
        out = io.StringIO()
        call_command("evaluate", "demo conversations", "--tenant", "acme", "--override", f"model={model}",
                     "--inline", "--wait", "60", "--json", stdout=out, stderr=err)  # fmt: skip
        tables[model] = json.loads(out.getvalue())
        text = io.StringIO()
        call_command("evaluate", "demo conversations", "--tenant", "acme", "--override", f"model={model}",
                     "--inline", "--wait", "60", stdout=text, stderr=err)  # fmt: skip
        print(f"\n--- model={model}\n{text.getvalue()}")
    assert "replays settled" in err.getvalue()
    same, other = tables["rules"], tables["rules-no-refunds"]
    assert same["totals"]["replays"] == other["totals"]["replays"] == 3
    by_run = {r["original_run_id"]: r for r in other["rows"]}
    support = by_run[result.runs["support_agent"]]
    assert support["replay"]["outcome"] == "suspended: awaiting_input" and not support["same_moves"]
    same_support = {r["original_run_id"]: r for r in same["rows"]}[result.runs["support_agent"]]
    assert same_support["same_moves"] and same_support["replay"]["outcome"] == "suspended: replay_refused"
    unknown = by_run[result.runs["unknown_operation"]]
    assert unknown["replay"]["outcome"] == "suspended: replay_refused"
    with tenant_bind(acme.tenant_id):
        assert EvalSet.objects.get(name="demo conversations").members.count() == 3
    with pytest.raises(CommandError, match="eval_set_not_found"):
        call_command(
            "evaluate", "no such set", "--tenant", "acme", stdout=io.StringIO(), stderr=io.StringIO()
        )
