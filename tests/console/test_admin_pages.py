"""The Django admin: every model the README claims has a page does, a long run's page stays small
(its events are linked in pages, not inlined), evidence is read-only and key hashes never show."""

from __future__ import annotations

import pytest
from django.apps import apps
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.urls import reverse

from bench.runs import conversation_run_bulk
from core.api_auth import api_key_create
from memory.models import ErasureRequest, MemoryItem
from memory.services import memory_remember
from retrieval.models import RetrievalSnapshot
from runs.kernel.models import AgentEvent, Summary
from tests.memory.test_memory import said

# Django 5.2's admin cannot show composite-key models (README, "Deviations"): LangGraph's tables and
# the full-text postings (derived index rows, one per word of a claim or chunk).
NOT_IN_ADMIN = {
    "runs.langgraphcheckpoint",
    "runs.langgraphblob",
    "runs.langgraphwrite",
    "memory.memoryposting",
    "retrieval.chunkposting",
    "retrieval.chunkterm",
}
KEEPER_APPS = {"core", "runs", "memory", "retrieval", "console", "sandbox"}


@pytest.fixture
def superuser_client(client, db):
    client.force_login(get_user_model().objects.create_superuser("root", password="pw-for-tests-1"))
    return client


def test_every_keeper_model_has_an_admin_page(db):
    models = {m._meta.label_lower for m in apps.get_models() if m._meta.app_label in KEEPER_APPS}
    registered = {m._meta.label_lower for m in admin.site._registry}
    assert models - registered == NOT_IN_ADMIN


def test_every_registered_changelist_answers_a_superuser(superuser_client, tenant):
    memory_remember(
        tenant=tenant, subject_id="cust-1", namespace="prefs", key="tone", value="brief", provenance=said()
    )
    for model in admin.site._registry:
        url = reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist")
        response = superuser_client.get(url)
        assert response.status_code == 200, url
    items = superuser_client.get(reverse("admin:memory_memoryitem_changelist")).content.decode()
    assert "cust-1" in items  # row-level security lets the superuser see the tenant's rows


def test_with_several_tenants_every_changelist_answers_and_memory_shows_one_tenant_at_a_time(
    superuser_client, tenant, other_tenant
):
    # Memory's and retrieval's row-level security take one tenant at a time: binding every tenant
    # at once made their pages a 500 as soon as there were two tenants.
    from core.tenancy import tenant_bind

    memory_remember(
        tenant=tenant, subject_id="cust-acme", namespace="prefs", key="tone", value="brief", provenance=said()
    )
    with tenant_bind(other_tenant.tenant_id):
        theirs = memory_remember(
            tenant=other_tenant,
            subject_id="cust-globex",
            namespace="prefs",
            key="tone",
            value="x",
            provenance=said(),
        )
    for model in admin.site._registry:
        url = reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist")
        assert superuser_client.get(url).status_code == 200, url
    listing = reverse("admin:memory_memoryitem_changelist")
    first = superuser_client.get(listing).content.decode()  # acme sorts first
    assert "cust-acme" in first and "cust-globex" not in first and "showing tenant acme" in first
    chosen = f"tenant__tenant_id__exact={other_tenant.tenant_id}"
    second = superuser_client.get(f"{listing}?{chosen}").content.decode()
    assert "cust-globex" in second and "cust-acme" not in second
    change = reverse("admin:memory_memoryitem_change", args=[theirs.memory_id])
    opened = superuser_client.get(change, {"_changelist_filters": chosen})
    assert opened.status_code == 200 and "cust-globex" in opened.content.decode()


def test_evidence_is_read_only_in_the_admin(superuser_client, tenant):
    for model in (AgentEvent, ErasureRequest, RetrievalSnapshot, Summary, MemoryItem):
        url = reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_add")
        assert superuser_client.get(url).status_code == 403, url


def test_the_audit_log_is_called_audit_entries(superuser_client):
    index = superuser_client.get("/admin/").content.decode()
    assert "Audit entries" in index and "Audit entrys" not in index


def test_an_api_key_page_never_shows_its_hash(superuser_client, tenant):
    created = api_key_create(tenant=tenant, name="ci", scope="read")
    listing = superuser_client.get(reverse("admin:core_apikey_changelist")).content.decode()
    detail = superuser_client.get(reverse("admin:core_apikey_change", args=[created.key.pk])).content.decode()
    assert created.key.prefix in listing and created.key.prefix in detail
    for page in (listing, detail):
        assert created.key.secret_sha256 not in page
        assert created.plaintext.split("_", 2)[2] not in page  # the secret (it may hold "_" itself)


def test_a_webhook_subscription_page_never_shows_its_signing_secret(superuser_client, tenant):
    from runs.webhooks.services import webhook_subscription_create

    created = webhook_subscription_create(
        tenant=tenant, url="https://hooks.example.com/k", event_types=["run.completed"], actor="test"
    )
    listing = superuser_client.get(reverse("admin:runs_webhooksubscription_changelist")).content.decode()
    detail = superuser_client.get(
        reverse("admin:runs_webhooksubscription_change", args=[created.subscription.pk])
    ).content.decode()
    assert "hooks.example.com/k" in listing and "hooks.example.com/k" in detail
    assert created.secret not in listing and created.secret not in detail


def test_a_run_of_800_events_has_a_small_admin_page_that_links_its_events(superuser_client, tenant):
    run = conversation_run_bulk(tenant_slug="acme", texts=[f"message {i}" for i in range(800)])
    page = superuser_client.get(reverse("admin:runs_agentrun_change", args=[run.run_id]))
    assert page.status_code == 200
    body = page.content.decode()
    # Before: every event inline, 1.45 MB; now the run's fields and a link (well under 100 kB).
    assert len(page.content) < 100_000, len(page.content)
    link = f"{reverse('admin:runs_agentevent_changelist')}?run__run_id__exact={run.run_id}"
    assert link in body
    events = superuser_client.get(link)
    assert events.status_code == 200
    assert len(events.context["cl"].result_list) == 100  # the first page of the run's 801 events
    assert events.context["cl"].result_list[0].run_id == run.run_id
