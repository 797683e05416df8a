"""The sign-in form in a real browser: a wrong password shows an error, the right one signs in."""

from __future__ import annotations

import pytest

from tests.console.conftest import screenshot

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_signing_in_and_out_in_a_browser(browser, live_server, role_users):
    context = browser.new_context(base_url=live_server.url)
    page = context.new_page()
    page.goto("/audit/")
    assert "/sign-in/" in page.url
    page.fill("input[name=username]", "engineer")
    page.fill("input[name=password]", "not the password")
    page.click("button[type=submit]")
    assert page.locator("[role=alert]").inner_text().startswith("Please enter a correct username")
    screenshot(page, "sign-in-error")
    page.fill("input[name=username]", "engineer")
    page.fill("input[name=password]", "pw-for-console-tests-1")
    page.click("button[type=submit]")
    page.wait_for_url("**/audit/")
    assert page.locator("h1").inner_text() == "Audit log"
    assert "sign_in" in page.locator("table").inner_text()
    page.click("text=Sign out")
    page.wait_for_url("**/sign-in/")
    context.close()
