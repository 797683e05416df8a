"""Every response carries a Content-Security-Policy, and the console's pages (htmx, the timeline,
their style sheets) run under it in a real browser with no violation reported."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model

from core.security import API_DOCS_POLICY, CONTENT_SECURITY_POLICY
from tests.console.conftest import PASSWORD
from tests.console.test_engineer import finish, start, suspended


@pytest.mark.django_db
def test_every_kind_of_response_carries_the_policy(client, as_role, tenant):
    pages = {
        "/sign-in/": 200,
        "/api/v1/runs/": 401,
        "/api/v1/nothing-here/": 404,
        "/admin/login/": 200,
        "/static/console/console.css": 200,
    }
    for url, status in pages.items():
        response = client.get(url)
        assert response.status_code == status, url
        assert response["Content-Security-Policy"] == CONTENT_SECURITY_POLICY, url
    policy = CONTENT_SECURITY_POLICY
    assert "script-src 'self';" in policy and "style-src 'self';" in policy and "unsafe" not in policy
    signed_in = as_role("engineer")
    for url in ("/runs/", "/queue/", "/audit/"):
        assert signed_in.get(url)["Content-Security-Policy"] == CONTENT_SECURITY_POLICY, url
    client.force_login(get_user_model().objects.create_superuser("root", password="pw-for-tests"))
    assert client.get("/admin/")["Content-Security-Policy"] == CONTENT_SECURITY_POLICY
    docs = client.get("/api/docs/")
    assert docs.status_code == 200 and docs["Content-Security-Policy"] == API_DOCS_POLICY  # Swagger UI only


def test_console_templates_have_no_inline_script_or_style():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    for template in [*root.glob("templates/**/*.html"), *root.glob("console/templates/**/*.html")]:
        text = template.read_text()
        assert "style=" not in text and "<style" not in text, template
        for tag in text.split("<script")[1:]:
            assert "src=" in tag.split(">")[0], template


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_the_consoles_pages_load_with_no_policy_violation(page_as, browser, live_server, tenant) -> None:
    run = finish(start(tenant, n=4))
    suspended(tenant)
    reported: list[str] = []

    def watch(page: Any) -> Any:
        page.on(
            "console",
            lambda m: reported.append(f"{page.url}: {m.text}") if "Content Security" in m.text else None,
        )
        return page

    engineer = watch(page_as("engineer"))
    for url in ("/runs/", f"/runs/{run.run_id}/", "/queue/", "/audit/"):
        engineer.goto(url)
        engineer.wait_for_load_state("networkidle")
    engineer.goto(f"/runs/{run.run_id}/")
    assert engineer.locator("svg.timeline").is_visible()
    engineer.fill("#diff-form input[name=a]", "2")
    engineer.fill("#diff-form input[name=b]", "4")
    engineer.click("#diff-form button[type=submit]")
    engineer.wait_for_selector("#revision-panel .diff-title")  # htmx ran and swapped
    heading = engineer.locator("#revision-panel .diff-title")
    assert heading.evaluate("e => getComputedStyle(e).fontSize") == "16px"  # the class replaced style=
    engineer.goto("/queue/")
    engineer.wait_for_selector("#queue-panel #by-status svg")
    support = watch(page_as("support"))
    support.goto("/support/")
    support.wait_for_load_state("networkidle")
    compliance = watch(page_as("compliance"))
    compliance.goto("/compliance/")
    compliance.wait_for_load_state("networkidle")
    get_user_model().objects.create_superuser("root", password=PASSWORD)
    admin = watch(browser.new_context(base_url=live_server.url).new_page())
    admin.goto("/admin/login/")
    admin.fill("input[name=username]", "root")
    admin.fill("input[name=password]", PASSWORD)
    admin.click("input[type=submit]")
    admin.wait_for_url("**/admin/")
    for url in ("/admin/runs/agentrun/", f"/admin/runs/agentrun/{run.run_id}/change/"):
        admin.goto(url)
        admin.wait_for_load_state("networkidle")
    admin.goto("/api/docs/")
    admin.wait_for_selector(".swagger-ui .info .title")  # Swagger UI started under its own policy
    assert reported == []
