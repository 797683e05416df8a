"""tenant_scope: the tenant for one transaction, put back when a nested scope ends."""

from __future__ import annotations

import uuid

import pytest
from django.db import connection, transaction

from core.tenancy import TENANT_SETTING, tenant_scope

pytestmark = pytest.mark.django_db(transaction=True)


def _current() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting(%s, true)", [TENANT_SETTING])
        return cursor.fetchone()[0] or ""


def test_a_scope_on_its_own_ends_with_its_transaction() -> None:
    first = uuid.uuid4()
    with tenant_scope(first):
        assert _current() == str(first)
    assert _current() == ""


def test_a_nested_scope_puts_the_outer_tenant_back() -> None:
    outer, inner = uuid.uuid4(), uuid.uuid4()
    with tenant_scope(outer):
        with tenant_scope(inner):
            assert _current() == str(inner)
        assert _current() == str(outer)
    assert _current() == ""


def test_a_scope_inside_an_outer_transaction_does_not_outlive_its_block() -> None:
    tenant = uuid.uuid4()
    with transaction.atomic():
        with tenant_scope(tenant):
            assert _current() == str(tenant)
        assert _current() == ""
