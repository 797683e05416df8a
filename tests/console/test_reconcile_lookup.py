"""The reconcile page shows what the payments lookup last said (the console's or the workflow's own)
and "Look up again" answers in place (htmx): role-checked, tenant-checked, audited."""

from __future__ import annotations

import pytest
from django.urls import reverse

from console.models import AuditEntry
from tests.console.test_support import _unknown_operation, unreachable_payments  # noqa: F401 - an autouse fixture

pytestmark = pytest.mark.django_db
HTMX = {"HTTP_HX_REQUEST": "true", "HTTP_HX_TARGET": "lookup-card"}


def test_the_page_shows_the_workflows_own_lookup_before_anyone_looks(as_role, tenant):
    op = _unknown_operation(tenant, note="resume: lookup not authoritative")
    html = as_role("support").get(reverse("console:support_operation", args=[op.pk])).content.decode()
    assert "The worker looked it up when it stopped the run" in html
    assert "resume: lookup not authoritative" in html and "Not looked up yet" not in html
    assert 'hx-post="{}"'.format(reverse("console:support_operation_lookup", args=[op.pk])) in html


def test_looking_up_again_answers_in_place_and_is_audited(as_role, tenant):
    op = _unknown_operation(tenant)
    support = as_role("support")
    response = support.post(reverse("console:support_operation_lookup", args=[op.pk]), **HTMX)
    assert response.status_code == 200
    html = response.content.decode()
    # only the card: no page around it, the answer of the lookup just made
    assert html.lstrip().startswith('<div class="card" id="lookup-card">') and "<html" not in html
    assert "Looked up just now by" in html and "the lookup failed" in html
    assert 'name="outcome"' in html  # the reconcile form comes back with the card
    [entry] = AuditEntry.objects.filter(action="lookup", target_id=str(op.pk))
    assert (entry.actor, entry.tenant_id, entry.details["authoritative"]) == (
        "user:support",
        tenant.tenant_id,
        False,
    )


def test_an_inline_lookup_of_a_tool_without_lookup_says_why_in_the_card(as_role, tenant, monkeypatch):
    op = _unknown_operation(tenant)
    monkeypatch.setattr("console.views.support_operations.registry.tool", lambda name: None)
    response = as_role("support").post(reverse("console:support_operation_lookup", args=[op.pk]), **HTMX)
    assert response.status_code == 200  # htmx swaps only 2xx: the reason is shown in the card
    assert "has no lookup here" in response.content.decode()
    assert not AuditEntry.objects.filter(action="lookup").exists()


def test_the_inline_lookup_checks_role_and_tenant(as_role, tenant, other_tenant):
    op = _unknown_operation(tenant)
    url = reverse("console:support_operation_lookup", args=[op.pk])
    assert as_role("engineer").post(url, **HTMX).status_code == 403
    theirs = _unknown_operation(other_tenant)
    assert (
        as_role("support")
        .post(reverse("console:support_operation_lookup", args=[theirs.pk]), **HTMX)
        .status_code
        == 404
    )
    assert not AuditEntry.objects.filter(action="lookup").exists()
