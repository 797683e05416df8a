"""The console's Evaluations page: engineers keep runs in a set, run it again with another support
model and read the table; every change checks the role, is audited and needs its CSRF token; a set's
name is escaped; in a real browser the pages fit 390 and 1366 px."""

from __future__ import annotations

import uuid

import pytest
from django.test import Client
from playwright.sync_api import expect

from console.models import AuditEntry
from runs.engine.replay_models import EvalRound, EvalSet
from runs.kernel.models import AgentRun
from tests.console.conftest import screenshot
from tests.console.test_widths_layout import LAYOUT_PROBLEMS
from tests.runs.workflows.test_support_agent import _drive, _say, _start, sandbox  # noqa: F401 - a fixture

pytestmark = pytest.mark.django_db(transaction=True)
XSS = '<script>alert("set")</script>'


def _conversation(tenant, sandbox, order_id: str) -> AgentRun:  # noqa: F811
    sandbox.order(order_id)
    run = _drive(_start(tenant, subject="cust-20"))
    _say(tenant, run, "m-1", f"Order {order_id} arrived damaged. Can I get a refund?")
    return _drive(run)


def test_an_engineer_keeps_a_run_runs_the_set_again_and_reads_the_table(as_role, tenant, sandbox):  # noqa: F811
    original = _conversation(tenant, sandbox, "o-500")
    engineer = as_role("engineer")
    assert engineer.post("/evaluations/new/", {"tenant": "acme", "name": XSS}).status_code == 302
    eval_set = EvalSet.objects.get(tenant=tenant)
    page = engineer.get("/evaluations/").content.decode()
    assert XSS not in page and "&lt;script&gt;alert(&quot;set&quot;)&lt;/script&gt;" in page
    kept = engineer.post(
        f"/evaluations/{eval_set.set_id}/add/", {"run_id": str(original.run_id), "at_seq": "1"}
    )
    assert kept.status_code == 302
    unknown = engineer.post(f"/evaluations/{eval_set.set_id}/add/", {"run_id": str(uuid.uuid4())})
    assert unknown.status_code == 404 and "no run" in unknown.content.decode()
    bad = engineer.post(f"/evaluations/{eval_set.set_id}/run/", {"support_model": "gpt-9"})
    assert bad.status_code == 422 and not EvalRound.objects.exists()
    started = engineer.post(f"/evaluations/{eval_set.set_id}/run/", {"support_model": "rules-no-refunds"})
    assert started.status_code == 302
    eval_round = EvalRound.objects.get()
    assert eval_round.overrides == {"backends": {"support_model": {"choice": "rules-no-refunds"}}}
    [replay] = AgentRun.objects.filter(replay=True)
    _drive(replay)
    table = engineer.get(started["Location"]).content.decode()
    assert "suspended: approval_required" in table and "suspended: awaiting_input" in table
    assert "different" in table and "A person will look at the refund" in table
    assert 'id="replay-mark"' in engineer.get(f"/runs/{replay.run_id}/").content.decode()
    assert 'id="replay-mark"' not in engineer.get(f"/runs/{original.run_id}/").content.decode()
    actions = set(AuditEntry.objects.filter(actor="user:engineer").values_list("action", flat=True))
    assert {"eval_set_create", "eval_set_add_run", "eval_round_start"} <= actions


def test_other_roles_are_refused_and_a_form_without_its_token_is_refused(as_role, role_users, tenant):
    support = as_role("support")
    assert support.get("/evaluations/").status_code == 403
    assert support.post("/evaluations/new/", {"tenant": "acme", "name": "s"}).status_code == 403
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(role_users["engineer"])
    assert strict.post("/evaluations/new/", {"tenant": "acme", "name": "s"}).status_code == 403
    assert not EvalSet.objects.exists()


@pytest.mark.slow
@pytest.mark.parametrize("width", [390, 1366])
def test_the_evaluation_pages_fit_the_window(page_as, tenant, sandbox, width):  # noqa: F811
    original = _conversation(tenant, sandbox, f"o-5{width}")
    page = page_as("engineer", width=width, height=860)
    page.goto("/evaluations/")
    page.fill("#new-set input[name=name]", "support conversations with a rather long name to wrap")
    page.click("#new-set button[type=submit]")
    expect(page.locator(".eval-set h3")).to_contain_text("support conversations")
    page.fill(".add-run input[name=run_id]", str(original.run_id))
    page.click(".add-run button[type=submit]")
    expect(page.locator(".eval-set ul.changes")).to_contain_text(str(original.run_id))
    page.select_option(".run-set select[name=support_model]", "rules-no-refunds")
    page.click(".run-set button[type=submit]")
    expect(page.locator("h1")).to_have_text("Evaluation round")
    [replay] = AgentRun.objects.filter(replay=True)
    _drive(replay)
    page.reload()
    expect(page.locator(".replay-outcome")).to_contain_text("suspended: awaiting_input")
    page.wait_for_load_state("networkidle")
    screenshot(page, f"evaluation-round-{width}")
    assert page.evaluate(LAYOUT_PROBLEMS) == [], width
    page.goto("/evaluations/")
    page.wait_for_load_state("networkidle")
    screenshot(page, f"evaluations-{width}")
    assert page.evaluate(LAYOUT_PROBLEMS) == [], width
