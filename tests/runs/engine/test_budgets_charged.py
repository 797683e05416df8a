"""Model calls charge the run's budgets (a real local chat server, real PostgreSQL, the real engine):
from the reply's usage or the tokenizer, priced per model, refused once spent; and the deadline."""

from __future__ import annotations

import json
import time

import pytest

from config.env import env_model_prices
from core.chat import chat_json
from runs.engine.charges import model_call_cost, model_calls_charged
from runs.engine.registry import Complete, Next, Step, StepContext, Suspend, Workflow, registry
from runs.engine.runs import run_resume, run_start
from runs.engine.steps import run_advance
from runs.kernel.models import AgentEvent, AgentRun
from tests.processes import flush_redis

pytestmark = pytest.mark.django_db

State = dict


def _ask(state: State) -> None:
    chat_json(
        base_url=state["url"],
        model=state.get("model", "gpt-4o-mini"),
        api_key="",
        messages=[{"role": "user", "content": "Is the order delivered? Answer JSON."}],
        timeout=5,
    )


def _asks(ctx: StepContext, state: State) -> Next:
    for _ in range(state.get("calls", 1)):
        _ask(state)
    return Next(state, "wait")


def _wait(ctx: StepContext, state: State) -> Suspend | Complete:
    if state.get("waited"):
        return Complete(state, "done")
    return Suspend({**state, "waited": True}, "waiting_for_person")


registry.register(
    Workflow(name="test.charged", version="1", steps=(Step("asks", _asks), Step("wait", _wait)))
)


@pytest.fixture(autouse=True)
def _fresh():
    flush_redis()
    yield
    flush_redis()


def _usage(chat, prompt=100, completion=50):
    chat.answer('{"ok": true}')
    chat.reply["usage"] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def _start(tenant, chat, **state):
    return run_start(
        tenant=tenant, workflow_name="test.charged", input={"url": chat.url, **state}, actor="test"
    ).run


def _run(run_id) -> AgentRun:
    return AgentRun.objects.get(run_id=run_id)


def test_a_call_in_a_step_charges_the_replys_usage_at_the_models_price(tenant, chat):
    _usage(chat, prompt=100, completion=50)
    run = _start(tenant, chat)
    run_advance(run_id=run.run_id)
    step = AgentEvent.objects.get(run=run, step_id="asks")
    cost = round(100 / 1000 * 0.00015 + 50 / 1000 * 0.0006, 6)  # gpt-4o-mini's default price
    assert step.payload["spent"]["tokens"] == 150 and step.payload["spent"]["cost_usd"] == cost
    budgets = _run(run.run_id).state["budgets"]
    assert budgets["tokens"]["used"] == 150 and budgets["cost_usd"]["used"] == cost


def test_without_usage_in_the_reply_the_tokenizer_counts_the_call(tenant, chat):
    chat.answer('{"ok": true}')  # no "usage"
    run = _start(tenant, chat)
    run_advance(run_id=run.run_id)
    spent = AgentEvent.objects.get(run=run, step_id="asks").payload["spent"]
    # The message (content + 4 framing tokens), the reply's priming (3), the reply '{"ok": true}'.
    assert 15 < spent["tokens"] < 40 and spent["cost_usd"] > 0


def test_prices_are_read_from_the_environment_and_change_the_charge(monkeypatch, settings):
    default = model_call_cost(model="gpt-4o-mini", prompt_tokens=1000, completion_tokens=1000)
    monkeypatch.setenv(
        "KEEPER_MODEL_PRICES",
        json.dumps(
            {"gpt-4o-mini": {"input_per_1k": 1, "output_per_1k": 2}, "local-llm": {"input_per_1k": 0.5}}
        ),
    )
    settings.KEEPER_MODEL_PRICES = env_model_prices("KEEPER_MODEL_PRICES")
    assert default == 0.00075
    assert model_call_cost(model="gpt-4o-mini", prompt_tokens=1000, completion_tokens=1000) == 3.0
    assert model_call_cost(model="local-llm", prompt_tokens=2000, completion_tokens=10) == 1.0
    monkeypatch.setenv("KEEPER_MODEL_PRICES", '{"gpt-4o-mini": {"input_per_1k": -1}}')
    with pytest.raises(Exception, match="must be a number >= 0"):
        env_model_prices("KEEPER_MODEL_PRICES")


def test_a_spent_token_budget_refuses_the_next_call_and_suspends_the_run(tenant, chat):
    _usage(chat, prompt=100, completion=50)
    run = _start(tenant, chat, calls=3, budgets={"tokens": 200})
    run_advance(run_id=run.run_id)
    run = _run(run.run_id)
    # 150, then 300: the third call is refused before it is sent.
    assert len(chat.requests) == 2
    assert run.status == "suspended" and run.suspend_reason == "budget_exhausted"
    assert "tokens 300" in run.suspend_detail
    assert run.state["budgets"]["tokens"]["used"] == 300
    # Resume recomputes from the log and refuses for the same reason; nothing more is sent.
    run_resume(run_id=run.run_id, actor="ops")
    run_advance(run_id=run.run_id)
    run = _run(run.run_id)
    assert run.suspend_reason == "budget_exhausted" and len(chat.requests) == 2
    refused = AgentEvent.objects.filter(run=run, event_type="resume_refused").get()
    assert refused.payload["checks"][-1]["code"] == "budget_exhausted"


def test_a_cost_budget_counts_too(tenant, chat):
    _usage(chat, prompt=10_000, completion=0)  # 0.0015 USD at gpt-4o-mini's price
    run = _start(tenant, chat, calls=2, budgets={"cost_usd": 0.001})
    run_advance(run_id=run.run_id)
    run = _run(run.run_id)
    assert len(chat.requests) == 1 and run.suspend_reason == "budget_exhausted"
    assert "cost_usd 0.0015/0.001" in run.suspend_detail


def test_a_call_outside_a_step_is_a_model_usage_event_that_resume_counts(tenant, chat):
    _usage(chat, prompt=100, completion=50)
    run = _start(tenant, chat, budgets={"tokens": 400})
    run_advance(run_id=run.run_id)  # 150 in the step
    run_advance(run_id=run.run_id)  # then it waits
    assert _run(run.run_id).suspend_reason == "waiting_for_person"
    with model_calls_charged(run_id=run.run_id, actor="system:compactor"):  # as the web process's compactor
        _ask({"url": chat.url})
        _ask({"url": chat.url})
    usage = list(AgentEvent.objects.filter(run=run, event_type="model_usage").order_by("seq"))
    assert [u.payload["spent"]["tokens"] for u in usage] == [150, 150]
    assert usage[0].actor == "system:compactor" and usage[0].payload["estimated"] is False
    # 450 of 400 spent: the next outside call is refused before it is sent ...
    with pytest.raises(Exception, match="tokens 450") as excinfo, model_calls_charged(run_id=run.run_id):
        _ask({"url": chat.url})
    assert excinfo.value.code == "budget_exhausted" and len(chat.requests) == 3
    # ... and resume recomputes the budgets from the log, model_usage events included.
    run_resume(run_id=run.run_id, actor="ops")
    run_advance(run_id=run.run_id)
    run = _run(run.run_id)
    assert run.suspend_reason == "budget_exhausted" and run.suspend_detail == "tokens 450/400"


def test_outside_charges_count_against_the_next_call_in_a_step(tenant, chat):
    _usage(chat, prompt=100, completion=50)
    run = _start(tenant, chat, budgets={"tokens": 250})
    with model_calls_charged(run_id=run.run_id):  # before the first step: 150 outside it
        _ask({"url": chat.url})
    run_advance(run_id=run.run_id)  # the step's call: 300 >= 250 after it
    run_advance(run_id=run.run_id)
    run = _run(run.run_id)
    assert run.status == "suspended" and run.suspend_reason == "waiting_for_person"
    run_resume(run_id=run.run_id, actor="ops")
    run_advance(run_id=run.run_id)
    run = _run(run.run_id)
    assert run.suspend_reason == "budget_exhausted" and run.suspend_detail == "tokens 300/250"


def test_a_deadline_counts_waiting_time_and_is_checked_at_resume(tenant, chat):
    _usage(chat)
    run = _start(tenant, chat, budgets={"deadline_s": 1})
    assert "deadline" in _run(run.run_id).state["budgets"]
    run_advance(run_id=run.run_id)
    run_advance(run_id=run.run_id)
    assert _run(run.run_id).suspend_reason == "waiting_for_person"
    time.sleep(1.2)  # waiting for a person counts
    run_resume(run_id=run.run_id, actor="ops")
    run_advance(run_id=run.run_id)
    run = _run(run.run_id)
    assert run.status == "suspended" and run.suspend_reason == "deadline_passed"
    assert "deadline" in run.suspend_detail


def test_a_deadline_passed_before_a_step_suspends_without_running_it(tenant, chat):
    _usage(chat)
    run = _start(tenant, chat, budgets={"deadline_s": 0.2})
    time.sleep(0.4)
    run_advance(run_id=run.run_id)
    run = _run(run.run_id)
    assert run.suspend_reason == "deadline_passed" and chat.requests == []


def test_a_bad_deadline_is_refused_with_a_reason(tenant, chat):
    from core.errors import InvalidInput

    with pytest.raises(InvalidInput, match="deadline_s must be a positive number"):
        _start(tenant, chat, budgets={"deadline_s": -5})


def test_the_model_compactor_outside_a_step_charges_its_run(tenant, chat):
    from bench.runs import conversation_run_bulk
    from runs.conversations.compaction.compactors import ModelCompactor
    from runs.conversations.compaction.services import summary_create
    from runs.conversations.compaction.tokens import token_counter

    run = conversation_run_bulk(tenant_slug=tenant.slug, texts=["I need a refund for ord-17.", "Checking."])
    events = list(AgentEvent.objects.filter(run=run, seq__gte=2).order_by("seq"))
    chat.answer(json.dumps({"facts": [], "open_questions": [], "decisions": []}))
    chat.reply["usage"] = {"prompt_tokens": 1000, "completion_tokens": 100}
    summary_create(
        run=run, events=events, counter=token_counter("gpt-4"), compactor=ModelCompactor(chat.url, "gpt-4o")
    )
    [usage] = AgentEvent.objects.filter(run=run, event_type="model_usage")
    assert usage.actor == "system:compactor" and usage.payload["model"] == "gpt-4o"
    assert usage.payload["spent"] == {"tokens": 1100, "cost_usd": round(0.0025 + 0.001, 6)}


def test_the_engineer_run_page_shows_spend_against_limits(tenant, chat, client):
    from django.urls import reverse

    from tests.console.conftest import make_user

    _usage(chat, prompt=100, completion=50)
    run = _start(tenant, chat, calls=3, budgets={"tokens": 200, "deadline_s": 3600})
    run_advance(run_id=run.run_id)  # suspended: tokens 300/200
    client.force_login(make_user("eng", "engineer", tenants=(tenant,)))
    page = client.get(reverse("console:run_detail", args=[run.run_id])).content.decode()
    budgets = page[page.index('id="budgets"') :]
    tokens = budgets[
        budgets.index('id="budget-tokens"') : budgets.index("</tr>", budgets.index('id="budget-tokens"'))
    ]
    assert 'class="expired"' in tokens and "<td>300</td><td>200</td>" in tokens and "150%" in tokens
    assert "3600 s from the start" in budgets[: budgets.index("</table>")]
    assert "no limit" in budgets[budgets.index('id="budget-steps"') :]


def test_the_refund_workflows_model_decider_charges_its_decide_step(tenant, chat, live_server, settings):
    from tests.runs.workflows.test_refund_workflow import Sandbox

    settings.KEEPER_SANDBOX_URL = live_server.url + "/sandbox"
    Sandbox(settings.KEEPER_SANDBOX_URL).order("o-charged")
    options = {"base_url": chat.url, "model": "gpt-4o", "api_key": ""}
    backend = {"BACKEND": "runs.workflows.refund.deciders.ModelDecider", "OPTIONS": options}
    settings.BACKENDS = {**settings.BACKENDS, "decider": backend}
    chat.answer(json.dumps({"outcome": "deny", "reasons": ["final sale"]}))
    chat.reply["usage"] = {"prompt_tokens": 200, "completion_tokens": 20}
    run = run_start(tenant=tenant, workflow_name="refund", input={"order_id": "o-charged"}, actor="t").run
    for _ in range(5):
        if run_advance(run_id=run.run_id).status != "running":
            break
    run = _run(run.run_id)
    assert run.status == "completed" and len(chat.requests) == 1
    spent = AgentEvent.objects.get(run=run, step_id="decide").payload["spent"]
    assert spent["tokens"] == 220 and spent["cost_usd"] == round(200 / 1000 * 0.0025 + 20 / 1000 * 0.01, 6)
    assert run.state["budgets"]["tokens"]["used"] == 220


def _conversation(tenant, budgets=None):
    from runs.conversations.messages import conversation_append

    input = {"budgets": budgets} if budgets else {}
    run = run_start(tenant=tenant, workflow_name="conversation", input=input, actor="t", subject="cust-9").run
    conversation_append(
        tenant=tenant,
        run_id=run.run_id,
        event_type="user_message",
        client_message_id="m1",
        body={"content": "Please answer in Russian."},
        actor="user:cust-9",
    )
    return run


def _model_extractor(settings, chat):
    options = {"base_url": chat.url, "model": "gpt-4o-mini", "api_key": ""}
    settings.BACKENDS = {
        **settings.BACKENDS,
        "extractor": {"BACKEND": "memory.extraction.ModelExtractor", "OPTIONS": options},
    }
    chat.answer(json.dumps({"facts": []}))
    chat.reply["usage"] = {"prompt_tokens": 300, "completion_tokens": 10}


def test_the_model_extractor_in_a_background_task_charges_its_run(tenant, chat, settings):
    from runs.conversations.learning import run_learn

    _model_extractor(settings, chat)
    run = _conversation(tenant)
    run_learn(run_id=run.run_id)
    [usage] = AgentEvent.objects.filter(run=run, event_type="model_usage")
    assert usage.actor == "system:extractor" and usage.payload["spent"]["tokens"] == 310


def test_a_spent_budget_refuses_the_extractor_without_failing_the_learning_task(tenant, chat, settings):
    from runs.conversations.learning import run_learn

    _model_extractor(settings, chat)
    run = _conversation(tenant, budgets={"tokens": 300})
    run_learn(run_id=run.run_id)  # 310 of 300 spent
    counts = run_learn(run_id=run.run_id)  # refused before it is sent: no crash of the task
    assert len(chat.requests) == 1 and counts["kept"] == 0 and "episode" in counts
    assert AgentEvent.objects.filter(run=run, event_type="model_usage").count() == 1
