"""Webhooks for engineers: the tenants' subscriptions, recent deliveries with their attempts, and
subscribe/delete (each audited; the new secret is shown once, on the page that created it)."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from django import forms
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST, require_safe

from console.audit import actor_of, audit_record
from console.roles import ENGINEER, role_required, tenant_for_user, user_tenants
from core.errors import ApplicationError
from runs.webhooks.models import EVENT_TYPES, WebhookSubscription
from runs.webhooks.services import (
    webhook_deliveries_recent,
    webhook_subscription_create,
    webhook_subscription_delete,
    webhook_subscriptions_all,
)


class SubscribeForm(forms.Form):
    tenant = forms.ChoiceField()
    url = forms.CharField(max_length=2000, label="Endpoint URL")
    event_types = forms.MultipleChoiceField(
        choices=[(t, t) for t in EVENT_TYPES], widget=forms.CheckboxSelectMultiple
    )

    def __init__(self, data: Any = None, *, tenants: list[Any]) -> None:
        super().__init__(data)
        self.fields["tenant"].choices = [(t.slug, t.slug) for t in tenants]  # type: ignore[attr-defined]


def _page(
    request: HttpRequest, form: SubscribeForm, *, created: Any = None, status: int = 200, error: str = ""
) -> HttpResponse:
    context = {
        "form": form,
        "error": error,
        "subscriptions": webhook_subscriptions_all(),
        "deliveries": webhook_deliveries_recent(limit=100),
        "created": created,
    }
    return render(request, "console/engineer/webhooks.html", context, status=status)


@role_required(ENGINEER)
@require_safe
def webhook_list(request: HttpRequest) -> HttpResponse:
    return _page(request, SubscribeForm(tenants=list(user_tenants(request.user))))


@role_required(ENGINEER)
@require_POST
def webhook_create(request: HttpRequest) -> HttpResponse:
    form = SubscribeForm(request.POST, tenants=list(user_tenants(request.user)))
    if not form.is_valid():
        return _page(request, form, status=422)
    tenant = tenant_for_user(request.user, form.cleaned_data["tenant"])
    try:
        created = webhook_subscription_create(
            tenant=tenant,
            url=form.cleaned_data["url"],
            event_types=form.cleaned_data["event_types"],
            actor=actor_of(request),
        )
    except ApplicationError as exc:
        form.add_error("url" if "url" in exc.code or "https" in exc.code else None, exc.message)
        return _page(request, form, status=422)
    subscription = created.subscription
    audit_record(
        request=request,
        action="webhook_create",
        tenant=tenant,
        target_type="webhook",
        target_id=subscription.id,
        details={"url": subscription.url, "event_types": subscription.event_types},
    )
    return _page(
        request, SubscribeForm(tenants=list(user_tenants(request.user))), created=created, status=201
    )


@role_required(ENGINEER)
@require_POST
def webhook_delete(request: HttpRequest, webhook_id: UUID) -> HttpResponse:
    found = WebhookSubscription.objects.filter(id=webhook_id).select_related("tenant").first()
    if found is None:  # another tenant's or unknown: not found (RLS shows only the user's tenants)
        return _page(request, SubscribeForm(tenants=list(user_tenants(request.user))), status=404)
    try:
        deleted = webhook_subscription_delete(subscription_id=webhook_id, actor=actor_of(request))
    except ApplicationError as exc:  # deleted meanwhile (a second click, another tab): said on the page
        form = SubscribeForm(tenants=list(user_tenants(request.user)))
        return _page(request, form, status=exc.http_status, error=exc.message)
    audit_record(
        request=request,
        action="webhook_delete",
        tenant=found.tenant,
        target_type="webhook",
        target_id=deleted.id,
        details={"url": deleted.url},
    )
    return redirect("console:webhook_list")
