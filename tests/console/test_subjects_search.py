"""Compliance finds subjects by id prefix or by what is stored about them, only in the user's own
tenants (an attacker of another tenant finds nothing); provenance run ids link, null reads "none"."""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse

from core.tenancy import tenant_bind
from memory.services import memory_remember
from runs.engine.runs import run_start
from tests.console.conftest import make_user
from tests.memory.test_memory import said

pytestmark = pytest.mark.django_db


def _find(client: Any, q: str, tenant: str = "") -> Any:
    params = {"q": q} | ({"tenant": tenant} if tenant else {})
    return client.get(reverse("console:compliance_home"), params)


def _seed(tenant: Any, other_tenant: Any) -> Any:
    run = run_start(
        tenant=tenant, workflow_name="demo.countdown", input={"n": 1}, actor="t", subject="cust-run-9"
    ).run
    memory_remember(
        tenant=tenant,
        subject_id="cust-501",
        namespace="profile",
        key="city",
        value="Trondheim",
        provenance=said(run_id=str(run.run_id)) | {"source_version": None},
    )
    memory_remember(
        tenant=tenant,
        subject_id="vip-77",
        namespace="preference",
        key="newsletter",
        value=True,
        provenance=said(),
    )
    with tenant_bind(other_tenant.tenant_id):
        memory_remember(
            tenant=other_tenant,
            subject_id="cust-secret",
            namespace="profile",
            key="city",
            value="Trondheim-Globex",
            provenance=said(),
        )
        run_start(
            tenant=other_tenant,
            workflow_name="demo.countdown",
            input={"n": 1},
            actor="t",
            subject="cust-hidden",
        )
    return run


def test_subjects_are_found_by_id_prefix_memory_key_value_and_run_subject(as_role, tenant, other_tenant):
    _seed(tenant, other_tenant)
    compliance = as_role("compliance")
    by_prefix = _find(compliance, "cust-")
    assert by_prefix.status_code == 200
    found = {(m.tenant.slug, m.subject_id, m.matched) for m in by_prefix.context["matches"]}
    assert found == {("acme", "cust-501", "subject id"), ("acme", "cust-run-9", "subject id")}
    assert [m.subject_id for m in _find(compliance, "newslet").context["matches"]] == ["vip-77"]
    [by_value] = _find(compliance, "trondheim").context["matches"]
    assert (by_value.subject_id, by_value.matched, by_value.memory_items) == ("cust-501", "memory value", 1)
    [by_run] = _find(compliance, "run-9").context["matches"]
    assert (by_run.subject_id, by_run.matched, by_run.runs) == ("cust-run-9", "run subject", 1)
    html = by_prefix.content.decode()
    assert f"{reverse('console:compliance_home')}?tenant=acme&amp;subject=cust-501" in html


def test_an_attacker_of_another_tenant_finds_nothing_of_it(as_role, tenant, other_tenant):
    _seed(tenant, other_tenant)
    compliance = as_role("compliance")
    for q in ("cust-secret", "cust-hidden", "Globex", "cust-"):
        subjects = {m.subject_id for m in _find(compliance, q).context["matches"]}
        assert not subjects & {"cust-secret", "cust-hidden"}, q
    # naming the other tenant outright is a 404, not an empty list that confirms it exists
    assert _find(compliance, "cust-", tenant="globex").status_code == 404
    # a compliance user of globex alone sees globex's subjects, and none of acme's
    client = as_role("compliance")
    client.force_login(make_user("globex-officer", "compliance", tenants=(other_tenant,)))
    found = {m.subject_id for m in _find(client, "cust-").context["matches"]}
    assert found == {"cust-secret", "cust-hidden"}


def test_an_officer_of_two_tenants_finds_the_subjects_of_both(client, tenant, other_tenant):
    # Memory's row-level security takes one tenant at a time: the search goes tenant by tenant
    # (a user of several tenants got a 500 when their ids were bound together).
    _seed(tenant, other_tenant)
    client.force_login(make_user("both-officer", "compliance", tenants=(tenant, other_tenant)))
    response = _find(client, "trondheim")
    assert response.status_code == 200
    found = {(m.tenant.slug, m.subject_id, m.memory_items) for m in response.context["matches"]}
    assert found == {("acme", "cust-501", 1), ("globex", "cust-secret", 1)}


def test_a_search_out_of_bounds_is_a_422_with_the_reason(as_role, tenant):
    compliance = as_role("compliance")
    for q in ("", "   ", "x" * 201):
        response = _find(compliance, q)
        assert response.status_code == 422
        assert "A search is 1 to 200 characters." in response.content.decode()


def test_provenance_run_ids_are_links_and_null_reads_none(as_role, tenant, other_tenant):
    run = _seed(tenant, other_tenant)
    html = (
        as_role("compliance")
        .get(reverse("console:compliance_home"), {"tenant": "acme", "subject": "cust-501"})
        .content.decode()
    )
    # The run a claim came from opens where a compliance officer can read it: the run and its event.
    source = reverse("console:compliance_source", args=["acme", run.run_id])
    assert f'<a class="wrap provenance" href="{source}?seq=' in html and f'">{run.run_id}</a>' in html
    assert '<dt>source_version</dt><dd dir="auto"><span class="muted">none</span></dd>' in html
    assert "null" not in html.split('id="claims"')[1].split('id="vectors"')[0]
