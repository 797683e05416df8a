"""Sign-in, roles and the audit log: anonymous visitors are sent to sign in, sign-in is throttled,
each role lands on its own screen, and the audit log is append-only in the database."""

from __future__ import annotations

import pytest
from django.db import connection, transaction
from django.db.utils import ProgrammingError
from django.test import override_settings

from console.models import AuditEntry
from tests.console.conftest import PASSWORD, make_user

pytestmark = pytest.mark.django_db


def test_anonymous_visitors_are_sent_to_sign_in(client):
    for url in ("/", "/audit/"):
        response = client.get(url)
        assert response.status_code == 302 and response["Location"].startswith("/sign-in/?next="), url


def test_sign_in_lands_each_role_on_its_screen_and_is_audited(client, role_users):
    response = client.post("/sign-in/", {"username": "support", "password": PASSWORD})
    assert response.status_code == 302 and response["Location"] == "/"
    assert AuditEntry.objects.filter(action="sign_in", target_id="support").count() == 1
    client.post("/sign-out/")
    assert client.get("/audit/").status_code == 302  # signed out
    client.force_login(role_users["nobody"])
    assert client.get("/").status_code == 403


def test_an_off_site_next_is_ignored(client, role_users):
    response = client.post(
        "/sign-in/", {"username": "support", "password": PASSWORD, "next": "https://evil.example/"}
    )
    assert response["Location"] == "/"


@override_settings(KEEPER_LOGIN_MAX_FAILURES=3)
def test_sign_in_is_throttled_after_repeated_failures(client, role_users):
    for _ in range(3):
        assert client.post("/sign-in/", {"username": "support", "password": "wrong"}).status_code == 200
    refused = client.post("/sign-in/", {"username": "support", "password": PASSWORD})
    assert refused.status_code == 429 and b"Too many failed sign-ins" in refused.content
    assert "_auth_user_id" not in client.session  # not even the right password gets in
    assert AuditEntry.objects.filter(action="sign_in_failed").count() == 3
    other = client.post("/sign-in/", {"username": "engineer", "password": PASSWORD})
    assert other.status_code == 302  # another account is not locked out by these failures


@override_settings(KEEPER_LOGIN_MAX_FAILURES=3)
def test_admin_sign_in_is_throttled_and_audited_like_the_consoles(client, db):
    from django.contrib.auth import get_user_model

    get_user_model().objects.create_superuser("admin", password=PASSWORD)
    for _ in range(3):
        failed = client.post("/admin/login/", {"username": "admin", "password": "wrong"})
        assert failed.status_code == 200 and "_auth_user_id" not in client.session
    assert AuditEntry.objects.filter(action="sign_in_failed", target_id="admin").count() == 3
    refused = client.post("/admin/login/?next=/admin/", {"username": "admin", "password": PASSWORD})
    assert refused.status_code == 200 and b"Too many failed sign-ins" in refused.content
    assert "_auth_user_id" not in client.session  # not even the right password gets in
    # The counters are shared: the console's sign-in refuses this user name too.
    assert client.post("/sign-in/", {"username": "admin", "password": PASSWORD}).status_code == 429


def test_admin_sign_in_is_audited(client, db):
    from django.contrib.auth import get_user_model

    get_user_model().objects.create_superuser("admin", password=PASSWORD)
    signed_in = client.post("/admin/login/?next=/admin/", {"username": "admin", "password": PASSWORD})
    assert signed_in.status_code == 302 and "_auth_user_id" in client.session
    assert AuditEntry.objects.filter(action="sign_in", target_id="admin").count() == 1


def test_the_audit_log_refuses_updates_and_deletes(db):
    entry = AuditEntry.objects.create(actor="user:x", action="approve", target_type="approval", target_id="1")
    for statement in (
        "UPDATE console_audit_log SET note = 'changed' WHERE id = %s",
        "DELETE FROM console_audit_log WHERE id = %s",
    ):
        with (
            pytest.raises(ProgrammingError, match="append-only"),
            transaction.atomic(),
            connection.cursor() as c,
        ):
            c.execute(statement, [entry.id])
    assert AuditEntry.objects.get(id=entry.id).note == ""


def test_a_user_sees_only_the_audit_entries_of_its_tenants(client, tenant, other_tenant):
    AuditEntry.objects.create(actor="user:a", tenant=tenant, action="approve", target_id="mine-1")
    AuditEntry.objects.create(actor="user:b", tenant=other_tenant, action="approve", target_id="theirs-1")
    client.force_login(make_user("eng2", "engineer", tenants=(tenant,)))
    page = client.get("/audit/").content.decode()
    assert "mine-1" in page and "theirs-1" not in page


def test_admin_shows_runs_events_read_only(client, tenant):
    from django.contrib.auth import get_user_model

    from runs.engine.runs import run_start

    client.force_login(get_user_model().objects.create_superuser("root", password="pw-for-tests"))
    run = run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": 1}, actor="test").run
    pages = [
        "/admin/runs/agentrun/",
        f"/admin/runs/agentrun/{run.run_id}/change/",
        "/admin/runs/agentevent/",
        "/admin/runs/tooloperation/",
        "/admin/runs/approval/",
        "/admin/core/tenant/",
        "/admin/sandbox/sandboxorder/",
        "/admin/sandbox/sandboxrefund/",
        "/admin/sandbox/sandboxfault/",
        "/admin/console/membership/",
        "/admin/console/membership/add/",
        "/admin/console/auditentry/",
    ]
    for url in pages:
        assert client.get(url).status_code == 200, url
    assert client.get("/admin/runs/agentevent/add/").status_code == 403
    assert client.get("/admin/console/auditentry/add/").status_code == 403
