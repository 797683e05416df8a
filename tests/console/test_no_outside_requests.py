"""No console page asks anything of a server other than Keeper (no CDN, font or analytics), for
each role; nothing a page loads is missing (the favicon included); a 403 page in the browser says
which role is needed and keeps the navigation; ReDoc (whose bundle fetches fonts) is not served."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import pytest

from runs.kernel.models import Approval
from tests.console.conftest import screenshot
from tests.console.test_compliance import SUBJECT, seed_subject
from tests.console.test_engineer import finish, start, suspended
from tests.runs.workflows.test_refund_workflow import _drive, _start, sandbox  # noqa: F401 - sandbox is a fixture

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def recorded(page: Any) -> tuple[list[str], list[str]]:
    """Every URL the page requests, and those answered 4xx/5xx (filled while the page lives)."""
    urls: list[str] = []
    failed: list[str] = []
    page.on("request", lambda request: urls.append(request.url))
    page.on("response", lambda response: failed.append(response.url) if response.status >= 400 else None)
    return urls, failed


def test_no_page_requests_anything_outside_the_server(page_as, live_server, tenant, sandbox):  # noqa: F811
    sandbox.order("o-950")
    run = _drive(_start(tenant, "o-950", reason="arrived broken"))
    approval = Approval.objects.get(run=run, status="pending")
    done = finish(start(tenant, n=3))
    suspended(tenant)
    seed_subject(tenant)
    visits = {
        "support": [
            "/support/",
            f"/support/approvals/{approval.approval_id}/",
            f"/support/runs/{run.run_id}/",
            "/audit/",
        ],
        "engineer": [
            "/runs/",
            f"/runs/{done.run_id}/",
            f"/runs/{done.run_id}/cancel/",
            "/runs/bulk/?action=resume",
            "/queue/",
            "/audit/?actor=engineer",
            "/api/docs/",
        ],
        "compliance": ["/compliance/", f"/compliance/?tenant=acme&subject={SUBJECT}", "/audit/"],
    }
    origin = urlsplit(live_server.url)
    for role, urls in visits.items():
        page = page_as(role)
        requested, failed = recorded(page)
        for url in urls:
            page.goto(url)
            page.wait_for_load_state("networkidle")
        page.wait_for_timeout(3_500)  # one round of each page's polling
        outside = [
            u
            for u in requested
            if urlsplit(u).scheme not in ("data", "blob", "about")
            and (urlsplit(u).scheme, urlsplit(u).netloc) != (origin.scheme, origin.netloc)
        ]
        assert outside == [], role
        assert failed == [], role  # nothing missing: no 404 for the favicon or a static file
        assert any(u.endswith("/favicon.svg") for u in requested), role


def test_the_403_page_in_the_browser_names_the_role_and_keeps_the_navigation(page_as):
    page = page_as("support")
    response = page.goto("/runs/")
    assert response is not None and response.status == 403
    assert "This needs the engineer role" in page.locator("#error-reason").inner_text()
    assert page.locator("header.top a", has_text="Support inbox").is_visible()
    page.click("#error-403 a:has-text('the support inbox')")
    page.wait_for_url("**/support/")
    screenshot(page, "error-403")


def test_redoc_is_not_served(client):
    assert client.get("/api/redoc/").status_code == 404
