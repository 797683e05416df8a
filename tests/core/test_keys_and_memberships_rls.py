"""API keys and console memberships are a tenant's data under row-level security, tested as the
application role (the tests' connection): they had none, though every table with a tenant's data
does. A key is resolved, and a user's tenants found, before any tenant is bound, through narrow
functions that answer with ids only."""

from __future__ import annotations

import uuid

import pytest
from django.contrib.auth import get_user_model
from django.db import DatabaseError, connection, transaction
from django.test import Client

from console.models import Membership
from core.api_auth import api_key_authenticate, api_key_create, api_key_revoke
from core.roles import member_tenant_ids
from core.tenancy import tenant_bind, tenant_ensure, tenant_scope
from tests.console.conftest import PASSWORD, make_user

pytestmark = pytest.mark.django_db

TABLES = ("api_keys", "console_memberships")
FUNCTIONS = ("keeper_api_key_resolve", "keeper_api_key_tenant", "keeper_user_tenants")


@pytest.fixture
def two():
    a, b = tenant_ensure(slug="rls-a"), tenant_ensure(slug="rls-b")
    keys = {t.tenant_id: api_key_create(tenant=t, name=f"k-{t.slug}", scope="write") for t in (a, b)}
    user = make_user("both", "support", tenants=(a, b))
    make_user("only-b", "support", tenants=(b,))
    return a, b, keys, user


def test_another_tenants_keys_and_memberships_are_invisible_and_unwritable(two):
    a, b, keys, user = two
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT current_user, (SELECT rolbypassrls FROM pg_roles WHERE rolname = current_user)"
        )
        role, bypass = cursor.fetchone()
        cursor.execute(
            "SELECT relname FROM pg_class WHERE relname = ANY(%s) AND relforcerowsecurity", [list(TABLES)]
        )
        assert sorted(r[0] for r in cursor.fetchall()) == sorted(TABLES)
    assert not bypass, role
    for mine, theirs in ((a, b), (b, a)):
        with tenant_bind(mine.tenant_id):
            with connection.cursor() as cursor:
                for table in TABLES:
                    cursor.execute(f"SELECT DISTINCT tenant_id FROM {table}")
                    assert {row[0] for row in cursor.fetchall()} == {mine.tenant_id}, table
                    cursor.execute(
                        f"UPDATE {table} SET tenant_id = tenant_id WHERE tenant_id <> %s", [mine.tenant_id]
                    )
                    assert cursor.rowcount == 0, table
                cursor.execute("SELECT prefix FROM api_keys")
                assert [r[0] for r in cursor.fetchall()] == [keys[mine.tenant_id].key.prefix]
            planted = {
                "INSERT INTO api_keys (key_id, tenant_id, name, prefix, secret_sha256, scope, created_at)"
                " VALUES (%s, %s, 'planted', 'planted', 'x', 'write', now())": uuid.uuid4(),
                "INSERT INTO console_memberships (user_id, tenant_id, created_at)"
                " VALUES (%s, %s, now())": get_user_model().objects.get(username="only-b").pk,
            }
            for statement, first in planted.items():
                with (
                    pytest.raises(DatabaseError, match="row-level security"),
                    transaction.atomic(),
                    connection.cursor() as cursor,
                ):
                    cursor.execute(statement, [first, theirs.tenant_id])
    with connection.cursor() as cursor:  # no tenant: nothing at all (fail closed)
        for table in TABLES:
            cursor.execute(f"SELECT count(*) FROM {table}")
            assert cursor.fetchone() == (0,), table


def test_the_narrow_functions_answer_with_ids_only(two):
    a, b, keys, user = two
    key = keys[a.tenant_id]
    secret = key.plaintext.split("_", 2)[2]
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT p.proname, p.prosecdef, pg_get_userbyid(p.proowner), p.proconfig,"
            " pg_get_function_result(p.oid) FROM pg_proc p WHERE p.proname = ANY(%s)",
            [list(FUNCTIONS)],
        )
        found = {row[0]: row[1:] for row in cursor.fetchall()}
        cursor.execute("SELECT current_user")
        app = cursor.fetchone()[0]
        cursor.execute("SELECT * FROM keeper_api_key_resolve(%s, %s)", [key.key.prefix, "0" * 64])
        assert cursor.fetchall() == []  # a wrong secret: nothing, not even the tenant
        cursor.execute("SELECT * FROM keeper_api_key_tenant(%s)", [key.key.prefix])
        assert cursor.fetchall() == [(a.tenant_id,)]
    assert set(found) == set(FUNCTIONS)
    for name, (definer, owner, config, result) in found.items():
        assert definer and owner != app and any(c.startswith("search_path=") for c in config or []), name
        assert not any(word in result for word in ("secret", "sha256", "name", "scope", "user")), (
            name,
            result,
        )
    assert api_key_authenticate(plaintext=key.plaintext).key_id == key.key.key_id
    assert api_key_authenticate(plaintext=f"kp_{key.key.prefix}_{'A' * 43}") is None
    assert secret and api_key_authenticate(plaintext=key.plaintext).tenant.slug == "rls-a"
    api_key_revoke(prefix=key.key.prefix)
    assert api_key_authenticate(plaintext=key.plaintext) is None
    assert sorted(member_tenant_ids(user_id=user.pk)) == sorted([a.tenant_id, b.tenant_id])


def test_a_key_a_console_user_and_the_admin_work_with_no_tenant_bound_first(two):
    a, b, keys, user = two
    api = Client(HTTP_AUTHORIZATION=f"Bearer {keys[b.tenant_id].plaintext}")
    assert api.get("/api/v1/runs/").status_code == 200
    console = Client()
    assert console.post("/sign-in/", {"username": "both", "password": PASSWORD}).status_code == 302
    page = console.get("/audit/")  # filtered by the user's tenants
    assert page.status_code == 200 and b"rls-a" in page.content and b"rls-b" in page.content
    get_user_model().objects.create_superuser("root", password=PASSWORD)
    admin = Client()
    admin.force_login(get_user_model().objects.get(username="root"))
    listing = admin.get("/admin/console/membership/")
    assert (
        listing.status_code == 200 and listing.content.count(b"both in") + listing.content.count(b"both") >= 2
    )
    added = admin.post(
        "/admin/console/membership/add/",
        {"user": get_user_model().objects.get(username="only-b").pk, "tenant": a.pk},
    )
    assert added.status_code == 302, added.content[:500]
    assert sorted(member_tenant_ids(user_id=get_user_model().objects.get(username="only-b").pk)) == sorted(
        [a.tenant_id, b.tenant_id]
    )
    keys_page = admin.get("/admin/core/apikey/")
    assert keys_page.status_code == 200 and keys[a.tenant_id].key.prefix.encode() in keys_page.content


def test_a_user_of_two_tenants_is_deleted_with_its_memberships(two):
    a, b, keys, user = two
    user.delete()  # nothing bound: Django's own cascade sees no membership; the foreign key's does
    with tenant_scope(a.tenant_id):
        assert not Membership.objects.filter(user_id=user.pk).exists()
    with tenant_scope(b.tenant_id):
        assert not Membership.objects.filter(user_id=user.pk).exists()
