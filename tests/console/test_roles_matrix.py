"""Every console URL checks its role on the server: each user without the role gets 403 for every
page and action (all of them, read from the URL map, not a sample), and an anonymous visitor is
sent to sign in."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.urls import URLPattern, URLResolver, get_resolver

from console.roles import ROLES

pytestmark = pytest.mark.django_db

SAMPLE = {
    # Fixed, so every pytest-xdist process collects the same test ids (a random id would differ).
    "UUIDConverter": "00000000-0000-4000-8000-000000000001",
    "IntConverter": "1",
    "StringConverter": "x",
    "SlugConverter": "x",
    "PathConverter": "x",
}
OPEN = {"sign_in", "sign_out", "home"}  # no role needed (home sends each role to its screen, 403 for none)


def _console_patterns() -> list[tuple[str, str, Any]]:
    [console] = [
        p for p in get_resolver().url_patterns if isinstance(p, URLResolver) and p.namespace == "console"
    ]
    found = []
    for pattern in console.url_patterns:
        assert isinstance(pattern, URLPattern)
        route = str(pattern.pattern)
        for name, converter in pattern.pattern.converters.items():
            value = SAMPLE[type(converter).__name__]
            route = re.sub(rf"<(\w+:)?{name}>", value, route)
        found.append(("/" + route, pattern.name or "", pattern.callback))
    return found


PATTERNS = _console_patterns()


def test_every_console_url_but_sign_in_and_out_declares_its_roles():
    undeclared = [
        name for _, name, view in PATTERNS if name not in OPEN and not getattr(view, "required_roles", None)
    ]
    assert undeclared == []
    assert len(PATTERNS) >= 4


@pytest.mark.parametrize(
    ("url", "name", "view"),
    [p for p in PATTERNS if p[1] not in OPEN],
    ids=lambda v: getattr(v, "__name__", str(v)),
)
def test_users_without_the_role_get_403_and_anonymous_visitors_sign_in(client, role_users, url, name, view):
    response = client.get(url)
    assert response.status_code == 302 and response["Location"].startswith("/sign-in/"), (
        url,
        response.status_code,
    )
    response = client.post(url, {"note": "x"})
    assert response.status_code == 302 and response["Location"].startswith("/sign-in/"), url
    outsiders = ["nobody", *(role for role in ROLES if role not in view.required_roles)]
    for username in outsiders:
        client.force_login(role_users[username])
        assert client.post(url, {"note": "x", "confirm": "x"}).status_code == 403, (url, username, "POST")
        assert client.get(url).status_code in (403, 405), (url, username, "GET")
        client.logout()
