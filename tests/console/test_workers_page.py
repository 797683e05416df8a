"""The queue page's workers (Flower-like) against a real Celery worker over the real broker: a live
worker shows its pool size, tasks processed and what it runs, with the broker's queue depth; killed,
it turns stale instead of vanishing."""

from __future__ import annotations

import re

import pytest
from django.conf import settings

from console.views import engineer_queue
from core.metrics import queue_depth
from tests.processes import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def _panel(client) -> str:
    engineer_queue.pinger.at = 0.0  # ask the workers now, not the answer cached for a few seconds
    return client.get("/queue/", HTTP_HX_REQUEST="true", HTTP_HX_TARGET="queue-panel").content.decode()


def _row(html: str) -> str:
    found = re.search(r'<tr data-worker="(test0@[^"]+)" data-stale="(\w+)".*?</tr>', html, re.S)
    return found.group(0) if found else ""


def test_a_live_worker_is_listed_then_turns_stale_when_it_stops(as_role, tenant, processes, monkeypatch):
    monkeypatch.setattr(engineer_queue.pinger, "seen", {})
    monkeypatch.setattr(engineer_queue, "STALE_AFTER", 2.0)
    client = as_role("engineer")
    worker = processes.worker(concurrency=2)
    found: dict[str, str] = {}

    def listed() -> bool:
        found["row"] = _row(_panel(client))
        return 'data-stale="false"' in found["row"]

    wait_until(listed, timeout=60, interval=1.0, message="the worker answers the console")
    row = found["row"]
    assert '<span class="pill completed">live</span>' in row
    assert re.search(r"<td>2 <span class=\"muted\">\(2 processes\)</span></td>", row)  # its pool
    assert "idle" in row or "<code>" in row
    html = _panel(client)
    assert f"Broker queue <code>{getattr(settings, 'CELERY_TASK_DEFAULT_QUEUE', 'celery')}</code>" in html
    assert f"<strong>{queue_depth()['depth']}</strong>" in html

    processes.kill(worker)
    wait_until(
        lambda: 'data-stale="true"' in _row(_panel(client)),
        timeout=30,
        interval=1.0,
        message="the killed worker turns stale",
    )
    row = _row(_panel(client))
    assert '<span class="pill failed">stale</span>' in row
    age = float(re.search(r"<td data-age>([\d.]+) s ago</td>", row).group(1))
    assert age > 2.0


def test_a_task_that_raises_in_a_worker_counts_as_failed_on_its_row(as_role, tenant, processes, monkeypatch):
    from workers.celery import app

    monkeypatch.setattr(engineer_queue.pinger, "seen", {})
    client = as_role("engineer")
    processes.worker(concurrency=1)
    wait_until(lambda: 'data-stale="false"' in _row(_panel(client)), timeout=60, interval=1.0, message="live")
    assert re.search(r"</td><td>0</td>", _row(_panel(client)))  # no failure yet
    app.send_task("workers.tasks.execute_erasure", args=["not-a-uuid", "not-a-uuid"])  # raises in the task
    wait_until(
        lambda: re.search(r"</td><td>1</td>", _row(_panel(client))) is not None,
        timeout=60,
        interval=1.0,
        message="the failure is counted on the worker's row",
    )


@pytest.mark.parametrize("pool", ["prefork", "threads"])
def test_a_workers_task_list_shows_the_steps_its_processes_ran(as_role, tenant, processes, monkeypatch, pool):
    """Flower's task list, in Keeper's words: the steps of runs this worker's processes committed,
    each with its run, its outcome and how long it took; another tenant's runs are not listed. On a
    thread pool (`make run`'s default) a step's actor names the thread after host:pid, and the list
    was empty there."""
    from runs.engine.runs import run_start

    monkeypatch.setattr(engineer_queue.pinger, "seen", {})
    client = as_role("engineer")
    processes.worker(concurrency=2, pool=pool)
    wait_until(lambda: 'data-stale="false"' in _row(_panel(client)), timeout=60, interval=1.0, message="live")
    run = run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": 2}, actor="t").run

    def done() -> bool:
        run.refresh_from_db()
        return run.status == "completed"

    wait_until(done, timeout=60, message="the worker runs the countdown")
    listing = client.get("/workers/").content.decode()
    name = re.search(r'<tr data-worker="(test0@[^"]+)"', listing).group(1)
    engineer_queue.pinger.at = 0.0
    page = client.get(f"/workers/{name}/").content.decode()
    tasks = page[page.index('id="worker-tasks"') :]
    assert (
        f"/runs/{run.run_id}/?focus=" in tasks and "<code>tick</code>" in tasks and "run_completed" in tasks
    )
    assert "in the last 24 hours" in tasks
    assert client.get("/workers/nobody@nowhere/").status_code == 404
