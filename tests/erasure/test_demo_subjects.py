"""Every subject of the demo `make run` loads can be erased, and every receipt is clean."""

from __future__ import annotations

import pytest
from django.db import connection

from console.demo import demo_load
from core.models import Tenant
from core.tenancy import tenant_scope
from erasure.services import erasure_execute, erasure_request_create
from runs.kernel.models import AgentEvent
from tests.erasure.agreement import assert_registry_agrees

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

# Every column that says whose data a row is: the demo's subjects are what these hold.
_SUBJECTS = """
SELECT subject FROM agent_runs WHERE tenant_id = %(t)s AND coalesce(subject, '') <> '' AND subject NOT LIKE 'erased:%%'
UNION SELECT subject_id FROM memory_items WHERE tenant_id = %(t)s
UNION SELECT subject_id FROM memory_held_claims WHERE tenant_id = %(t)s
UNION SELECT subject FROM workflow_schedules WHERE tenant_id = %(t)s AND subject <> ''
"""


def _subjects(tenant: Tenant) -> list[str]:
    with tenant_scope(tenant.tenant_id), connection.cursor() as cursor:
        cursor.execute(_SUBJECTS, {"t": tenant.tenant_id})
        return sorted(row[0] for row in cursor.fetchall())


def test_every_demo_subject_can_be_erased_and_every_receipt_is_clean(live_server, settings, tmp_path):
    settings.KEEPER_SANDBOX_URL = live_server.url + "/sandbox"
    settings.KEEPER_PAYMENTS_TIMEOUT = 1.0
    assert demo_load(data_dir=tmp_path).loaded
    erased: dict[str, tuple[str, str]] = {}
    for tenant in Tenant.objects.order_by("slug"):
        for subject in _subjects(tenant):
            request = erasure_request_create(tenant=tenant, subject_id=subject, requested_by="user:test")
            done = erasure_execute(tenant_id=tenant.tenant_id, request_id=request.request_id)
            erased[f"{tenant.slug}/{subject}"] = (done.status, done.error)
            assert_registry_agrees(done.receipt)
    # The demo's customers: the refunds' and the LangGraph thread's, and the support conversation's.
    assert {"acme/cust-1001", "acme/cust-1003"} <= set(erased)
    assert {k: v for k, v in erased.items() if v != ("completed", "")} == {}
    acme = Tenant.objects.get(slug="acme")
    with tenant_scope(acme.tenant_id):  # the customer's own messages keep an actor, a keyed one
        actors = set(AgentEvent.objects.filter(event_type="user_message").values_list("actor", flat=True))
    assert actors and all(a.startswith("erased:") for a in actors), actors
