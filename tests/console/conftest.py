"""Console fixtures: a user per role (member of the tenant "acme"), signed-in clients, and a real
browser (Debian's chromium driven by Playwright) against a live server."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group

from console.models import Membership
from console.roles import ROLES
from core.tenancy import tenant_scope

if TYPE_CHECKING:
    from playwright.sync_api import Dialog

PASSWORD = "pw-for-console-tests-1"
ARTIFACTS = Path(os.environ.get("KEEPER_TEST_ARTIFACTS", Path(__file__).resolve().parents[2] / ".artifacts"))


def make_user(username: str, *roles: str, tenants: tuple[Any, ...] = ()) -> Any:
    user = get_user_model().objects.create_user(username, password=PASSWORD)
    for role in roles:
        user.groups.add(Group.objects.get_or_create(name=role)[0])
    for tenant in tenants:
        with tenant_scope(tenant.tenant_id):  # memberships are under row-level security
            Membership.objects.create(user=user, tenant=tenant)
    return user


@pytest.fixture
def role_users(tenant) -> dict[str, Any]:
    """One user per role, each a member of acme only; plus "nobody" (a member with no role)."""
    users = {role: make_user(role, role, tenants=(tenant,)) for role in ROLES}
    users["nobody"] = make_user("nobody", tenants=(tenant,))
    return users


@pytest.fixture
def as_role(client, role_users) -> Callable[[str], Any]:
    def sign_in(role: str) -> Any:
        client.force_login(role_users[role])
        return client

    return sign_in


# --- the browser -------------------------------------------------------------------------------

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
    "--disable-quic",
]


# One browser per module, not per session: Playwright's sync API keeps an event loop running in the
# test process's thread while it lives, and later tests in the same process (LangGraph's async
# savers, asyncio.run, async_to_sync) must not find one there.
@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    executable = shutil.which("chromium")
    if executable is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed; .ci/run installs it (apt-get install chromium)")
        pytest.skip("chromium is not installed (apt-get install chromium); browser tests skipped")
    from playwright.sync_api import sync_playwright

    # Playwright's sync API runs an event loop in this thread; the test's own ORM calls are still
    # synchronous and safe, so Django's guard against ORM calls inside an event loop is lifted.
    before = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as playwright:
            launched = playwright.chromium.launch(
                executable_path=executable, args=CHROMIUM_ARGS, headless=True
            )
            yield launched
            launched.close()
    finally:
        if before is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = before


@pytest.fixture
def page_as(browser, live_server, role_users, request) -> Iterator[Callable[[str], Any]]:
    """page_as("support") -> a Playwright page signed in through the real sign-in form (a window of
    1360 x 900 unless `width` and `height` say otherwise)."""
    contexts = []

    def open_as(role: str, *, width: int = 1360, height: int = 900) -> Any:
        context = browser.new_context(base_url=live_server.url, viewport={"width": width, "height": height})
        contexts.append(context)
        page = context.new_page()
        page.set_default_timeout(15_000)
        page.goto("/sign-in/")
        page.fill("input[name=username]", role_users[role].username)
        page.fill("input[name=password]", PASSWORD)
        page.click("button[type=submit]")
        page.wait_for_load_state()
        return page

    yield open_as
    for context in contexts:
        context.close()


def dialogs_dismissed(page: Any) -> list[str]:
    """Dismiss every dialog the page opens (an alert means injected script ran); the returned list
    collects their messages."""
    messages: list[str] = []

    def dismiss(dialog: Dialog) -> None:
        messages.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", dismiss)
    return messages


def screenshot(page: Any, name: str) -> Path:
    """Save a full-page screenshot as a test artifact (.artifacts/screenshots/<name>.png)."""
    folder = ARTIFACTS / "screenshots"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path
