"""Failing a user name's sign-in on purpose does not lock its owner out: the throttle counts per client
and name (anyone could lock out `admin` by failing it five times)."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client, override_settings

from console.models import AuditEntry
from tests.console.conftest import PASSWORD

pytestmark = pytest.mark.django_db

ATTACKER, OWNER = "203.0.113.9", "198.51.100.7"


def _sign_in(address: str, username: str, password: str, path: str = "/sign-in/"):
    client = Client(REMOTE_ADDR=address)
    response = client.post(path, {"username": username, "password": password})
    return response, "_auth_user_id" in client.session


@override_settings(KEEPER_LOGIN_MAX_FAILURES=3)
@pytest.mark.parametrize("path", ["/sign-in/", "/admin/login/"])
def test_failing_a_user_name_from_one_client_does_not_lock_out_its_owner_elsewhere(path):
    get_user_model().objects.create_superuser("admin", password=PASSWORD)
    for _ in range(5):
        _sign_in(ATTACKER, "admin", "wrong", path)
    refused, signed_in = _sign_in(ATTACKER, "admin", PASSWORD, path)
    assert not signed_in and b"Too many failed sign-ins" in refused.content  # the attacker's client is held
    response, signed_in = _sign_in(OWNER, "admin", PASSWORD, path)
    assert signed_in, response.content[:300]  # the owner, from their own client, is not
    assert AuditEntry.objects.filter(action="sign_in_failed", remote_addr=ATTACKER).count() == 3


@override_settings(KEEPER_LOGIN_MAX_FAILURES=2)
def test_a_client_failing_many_names_is_held_at_four_times_the_limit():
    user = get_user_model().objects.create_user("ann", password=PASSWORD)
    assert user.pk
    for n in range(8):  # 2 x 4 failures, each with another name
        assert _sign_in(ATTACKER, f"guess{n}", "wrong")[0].status_code == 200
    refused, signed_in = _sign_in(ATTACKER, "ann", PASSWORD)
    assert refused.status_code == 429 and not signed_in
    assert _sign_in(OWNER, "ann", PASSWORD)[1]
