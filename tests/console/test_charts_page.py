"""The charts page: runs started/completed/failed/suspended per minute, step latency percentiles and
approvals waiting with their age, from the user's own tenants only, drawn as SVG without script."""

from __future__ import annotations

import re

import pytest

from core.tenancy import tenant_bind
from runs.engine.runs import run_start, run_suspend
from tests.console.test_engineer import finish, start
from tests.console.test_support import _approval

pytestmark = pytest.mark.django_db


def _totals(html: str) -> dict[str, int]:
    return {name: int(n) for name, n in re.findall(r'data-total="(\w+)">\w+ (\d+)</span>', html)}


def test_the_charts_count_the_users_runs_step_latency_and_waiting_approvals(
    as_role, tenant, other_tenant, settings
):
    settings.KEEPER_RETRY_BACKOFF = 0
    settings.KEEPER_MAX_ATTEMPTS = 1
    finish(start(tenant, n=2))  # started, 3 steps, completed
    failing = run_start(tenant=tenant, workflow_name="test.flaky", input={"fail_times": 5}, actor="t").run
    finish(failing)  # one attempt allowed: suspended with its step error
    run_suspend(run_id=start(tenant).run_id, actor="user:ops", reason="operator_pause")
    _approval(tenant)  # a run suspended for an approval that waits
    with tenant_bind(other_tenant.tenant_id):
        for _ in range(3):
            finish(start(other_tenant, n=1))  # another tenant's: never counted here
    response = as_role("engineer").get("/charts/")
    assert response.status_code == 200
    html = response.content.decode()
    assert _totals(html) == {"started": 4, "completed": 1, "failed": 0, "suspended": 3}
    runs_chart = html.split('id="runs-chart"')[1].split("</section>")[0]
    assert '<polyline class="series series-started"' in runs_chart
    assert re.search(r"<title>started 4 at \d\d:\d\d UTC</title>", runs_chart)  # all in this minute
    latency = html.split('id="latency-chart"')[1].split("</section>")[0]
    assert "(5 steps)" in latency  # start, tick, tick, finish, and the failed attempt
    assert "<title>p50 " in latency and "<title>p99 " in latency
    approvals = html.split('id="approvals-chart"')[1].split("</section>")[0]
    assert '<span class="muted" data-waiting>1</span>' in approvals and "data-oldest" in approvals
    assert re.search(
        r'<g class="age age-0"><text[^>]*>&lt; 5 min</text><rect[^>]*></rect><text[^>]*>1</text>', approvals
    )
    assert "<script" not in html.split("<main")[1]


def test_the_day_window_and_bad_windows(as_role, tenant):
    finish(start(tenant, n=1))
    client = as_role("engineer")
    day = client.get("/charts/", {"window": "day"})
    assert day.status_code == 200 and "per 15 minutes" in day.content.decode()
    assert _totals(day.content.decode())["completed"] == 1
    bad = client.get("/charts/", {"window": "week"})
    assert bad.status_code == 422 and "window must be one of: hour, day" in bad.content.decode()
    assert as_role("support").get("/charts/").status_code == 403
