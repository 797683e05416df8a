"""An engineer's whole job on the demo, in a real browser at laptop and phone width: follow a run from
the list to its timeline and a diff, sort the list by a column across pages, fork and rewind, accept
a changed state, send a signal and run a query, edit a schedule, and reach every other page
(webhooks, charts, memory, workers) from the menu."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from runs.kernel.models import AgentRun
from tests.console.journeys.conftest import eventually

pytestmark = [pytest.mark.journeys, pytest.mark.slow]
ENGINEER = "acme-engineer"
POLLED = 15_000


def _run(demo, run_id: str) -> AgentRun:
    with demo.db(demo.tenant_id("acme")):
        return AgentRun.objects.get(run_id=run_id)


def _menu(who, name: str):
    """A page of the top menu."""
    return who.click(who.page.locator("header.top nav.menu").get_by_role("link", name=name, exact=True))


def test_engineer_follows_a_run_from_the_list_to_its_timeline_and_a_diff(person, demo):
    who = person(ENGINEER)
    page = who.page
    _menu(who, "Runs")
    table = page.locator("#run-table")
    expect(table.locator("th", has_text="started")).to_have_count(1)
    expect(table.locator("th", has_text="duration")).to_have_count(1)
    who.click(table.get_by_role("link", name="started"))  # sortable: oldest first, then newest
    completed = demo.runs["completed"]
    who.click(page.locator(f'tr[data-run="{completed}"] a').first)
    expect(page.locator("#run-input")).to_contain_text('"n": 4')
    expect(page.locator("#run-result")).to_contain_text('"counted": 4')
    steps = page.locator("#steps")
    expect(steps.locator('tr[data-step="tick"]').first).to_contain_text("remaining")  # the step's real output
    expect(page.locator("#timeline svg")).to_be_visible()
    who.shot("engineer-run-page")
    page.fill("#diff-form input[name=a]", "2")
    page.fill("#diff-form input[name=b]", "4")
    page.locator("#diff-form").get_by_role("button", name="Compare").click()
    expect(page.locator("#revision-panel")).to_contain_text("$.remaining")
    who.check()


def test_engineer_sorts_the_run_list_by_a_column_and_the_order_holds_on_the_next_page(person, demo):
    who = person(ENGINEER)
    page = who.page
    who.visit("/runs/?limit=3")
    table = page.locator("#run-table")
    # The header at laptop width, the sort bar above the stacked rows at phone width: one link each.
    who.click(table.get_by_role("link", name="workflow", exact=True))
    expect(table.locator("th", has_text="workflow")).to_have_attribute("aria-sort", "ascending")
    rows = table.locator("tbody tr[data-run]")
    first = rows.evaluate_all("rows => rows.map(r => r.dataset.run)")
    who.click(table.get_by_role("link", name="next page »"))  # htmx swaps the table in place
    page.wait_for_url("**cursor=*")
    expect(rows.first).not_to_have_attribute("data-run", first[0])
    expect(table.locator("th", has_text="workflow")).to_have_attribute("aria-sort", "ascending")
    assert "sort=workflow" in page.url and "limit=3" in page.url
    second = rows.evaluate_all("rows => rows.map(r => r.dataset.run)")
    # The demo's worker and schedules may start runs meanwhile: the six shown, in the database's order.
    with demo.db(demo.tenant_id("acme")):
        shown = AgentRun.objects.filter(run_id__in=first + second).order_by("workflow_name", "run_id")
        expected = [str(run_id) for run_id in shown.values_list("run_id", flat=True)]
    assert first + second == expected and len(expected) == 6
    who.check()


def test_engineer_forks_a_run_and_rewinds_another(person, demo):
    who = person(ENGINEER)
    page = who.page
    who.visit(f"/runs/{demo.runs['completed']}/")
    fork = page.locator("#fork-form")
    fork.locator("input[name=at_seq]").fill("3")
    fork.locator("input[name=note]").fill("try the last ticks again")
    who.click(fork.get_by_role("button", name="Fork"))
    expect(page.locator("ul.messages")).to_contain_text("was forked at event 3")
    child = page.url.rstrip("/").rsplit("/", 1)[-1]
    eventually(lambda: _run(demo, child).status == "completed", demo, "the fork to complete")
    # Rewind the same run: a new run goes on from event 2, and the original is marked superseded.
    original = demo.runs["completed"]
    who.visit(f"/runs/{original}/")
    rewind = page.locator("#rewind-form")
    rewind.locator("input[name=at_seq]").fill("2")
    rewind.locator("input[name=note]").fill("start over from the first tick")
    who.click(rewind.get_by_role("button", name="Rewind"))
    page.fill("#confirm-note", "start over from the first tick")
    who.click(page.locator("#confirm-form button[type=submit]"))
    expect(page.locator("ul.messages")).to_contain_text("was rewound to event 2")
    who.visit(f"/runs/?q={original}")
    expect(page.locator(f'tr[data-run="{original}"]')).to_contain_text("superseded")


def test_engineer_sees_a_refused_resume_honestly_then_accepts_the_changed_state(person, demo):
    who = person(ENGINEER)
    page = who.page
    run_id = demo.runs["refused_resume"]
    who.visit(f"/runs/{run_id}/")
    actions = page.locator("#actions")
    expect(actions).to_contain_text("accept the changed state first")
    expect(actions.get_by_role("button", name="Resume")).to_have_count(0)
    change = page.locator("#state-change")
    expect(change).to_contain_text("$.remaining")
    change.locator("input[name=note]").fill("the operator set remaining to 99 on purpose")
    who.click(change.get_by_role("button", name="Accept the changed state"))
    expect(page.locator("ul.messages")).to_contain_text("was accepted")
    actions.locator("input[name=note]").first.fill("continue from the accepted state")
    who.click(actions.get_by_role("button", name="Resume"))
    message = page.locator("ul.messages")
    expect(message).not_to_contain_text("done")
    expect(message).to_contain_text("a worker verifies")
    eventually(
        lambda: _run(demo, run_id).status != "suspended", demo, "the accepted run to go on", timeout=90
    )


def test_engineer_runs_a_query_and_sends_a_signal_from_the_run_page(person, demo):
    who = person(ENGINEER)
    page = who.page
    run_id = demo.runs["credit_waiting_for_documents"]
    who.visit(f"/runs/{run_id}/")
    query = page.locator("#query-form")
    query.locator("select[name=name]").select_option("progress")
    query.get_by_role("button", name="Run the query").click()
    expect(page.locator("#query-answer")).to_contain_text("waiting for documents")
    signal = page.locator("#signal-form")
    signal.locator("select[name=name]").select_option("documents_received")
    signal.locator("textarea[name=payload]").fill('{"documents": ["payslip-2026-11.pdf"]}')
    signal.locator("input[name=note]").fill("the customer uploaded the payslip")
    who.click(signal.get_by_role("button", name="Send the signal"))
    expect(page.locator("ul.messages")).to_contain_text("Signal documents_received sent")
    eventually(lambda: _run(demo, run_id).status == "completed", demo, "the signalled run to complete")
    who.visit(f"/runs/{run_id}/")
    expect(page.locator("#run-result")).to_contain_text("payslip-2026-11.pdf")


def test_engineer_creates_edits_pauses_and_deletes_a_schedule(person, demo):
    who = person(ENGINEER)
    page = who.page
    _menu(who, "Schedules")
    who.click("New schedule")
    form = page.locator("#schedule-form")
    form.locator("select[name=tenant]").select_option("acme")
    form.locator("select[name=workflow_name]").select_option("demo.countdown")
    form.locator("input[name=interval_seconds]").fill("3600")
    form.locator("textarea[name=input]").fill('{"n": 2}')
    form.locator("input[name=note]").fill("an hourly heartbeat run")
    who.click(form.get_by_role("button", name="Create the schedule"))
    row = page.locator("#schedules tr", has_text="every 3600 s")
    expect(row).to_contain_text("active")
    # Sortable columns, as Flower's and the admin's lists: by "when", up then down.
    when = page.locator("#schedules th", has_text="when")
    when.get_by_role("button").click()
    expect(when).to_have_attribute("aria-sort", "ascending")
    expect(page.locator("#schedules tbody tr").first).to_contain_text("every 3600 s")
    when.get_by_role("button").click()
    expect(page.locator("#schedules tbody tr").first).to_contain_text("every 86400 s")
    who.click("Edit", within=row)
    page.locator("#schedule-form input[name=interval_seconds]").fill("7200")
    page.locator("#schedule-form input[name=note]").fill("every two hours is enough")
    who.click(page.locator("#schedule-form").get_by_role("button", name="Save"))
    row = page.locator("#schedules tr", has_text="every 7200 s")
    # Delete is drawn as destructive (red), apart from Edit and Pause.
    expect(row.get_by_role("link", name="Delete…")).to_have_css("background-color", "rgb(180, 35, 24)")
    who.click("Pause…", within=row)
    page.fill("#confirm-note", "not during the migration")
    who.click(page.get_by_role("button", name="Pause this schedule"))
    expect(page.locator("#schedules tr", has_text="every 7200 s")).to_contain_text("paused")
    who.click("Delete…", within=page.locator("#schedules tr", has_text="every 7200 s"))
    page.fill("#confirm-note", "replaced by the nightly job")
    who.click(page.get_by_role("button", name="Delete this schedule"))
    expect(page.locator("#schedules tr", has_text="every 7200 s")).to_have_count(0)


def test_engineer_reaches_every_page_from_the_menu(person, demo):
    who = person(ENGINEER)
    page = who.page
    for name, heading in (
        ("Queue health", "Queue health"),
        ("Workers", "Workers"),
        ("Schedules", "Schedules"),
        ("Workflows", "Workflows"),
        ("Webhooks", "Webhooks"),
        ("Charts", "Charts"),
        ("Memory", "Memory"),
        ("Audit log", "Audit log"),
    ):
        _menu(who, name)
        expect(page.locator("h1")).to_contain_text(heading)
        who.shot(f"engineer-{name.lower().replace(' ', '-')}")
    # The charts' axis labels are whole: none starts left of its drawing (a latency's "1.254 s" was cut).
    _menu(who, "Charts")
    cut = page.evaluate(
        "() => [...document.querySelectorAll('svg.chart text')].filter(t => t.getBBox().x < 0).map(t => t.textContent)"
    )
    assert cut == [], cut
    # The webhooks' Delete is destructive; the workflows page says LangGraph threads can go on.
    _menu(who, "Workflows")
    expect(page.locator("main")).not_to_contain_text("cannot continue")
    # Flower's task list of one worker: what it ran lately, each step with its run (a fork started
    # now gives the worker steps to run, whichever of this module's tests ran before).
    who.visit(f"/runs/{demo.runs['completed']}/")
    fork = page.locator("#fork-form")
    fork.locator("input[name=at_seq]").fill("2")
    fork.locator("input[name=note]").fill("steps for the worker's task list")
    who.click(fork.get_by_role("button", name="Fork"))
    child = page.url.rstrip("/").rsplit("/", 1)[-1]
    eventually(lambda: _run(demo, child).status == "completed", demo, "the fork to complete")
    _menu(who, "Workers")
    who.click(page.locator("#workers tbody tr a").first)
    tasks = page.locator("#worker-tasks")
    expect(tasks.locator(f'a[href^="/runs/{child}/"]').first).to_be_visible()
    expect(tasks).to_contain_text("run_completed")
    who.shot("engineer-worker-tasks")
    # A memory claim's provenance leads to the run and the event it names.
    _menu(who, "Memory")
    page.fill("input[name=subject]", "cust-1001")
    who.click(page.get_by_role("button", name="Show"))
    link = page.locator("#memory-items a.provenance").first
    who.click(link)
    expect(page.locator("tr.focused, #seq-focus")).to_have_count(1)
