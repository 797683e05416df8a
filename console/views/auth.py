"""Sign-in with throttling, sign-out, the home page (each role's first screen), and the audit log."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth import login, logout
from django.contrib.auth.decorators import login_required
from django.contrib.auth.forms import AuthenticationForm
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_http_methods, require_POST

from console.audit import actor_of, audit_record
from console.htmx import HtmxHttpRequest
from console.roles import COMPLIANCE, ENGINEER, SUPPORT, role_required, tenant_ids_for_user, user_roles
from console.selectors import audit_entry_page
from console.sign_in import sign_in_failure_record, sign_in_throttled

AUDIT_PAGE = 50


@require_http_methods(["GET", "POST"])
def sign_in(request: HtmxHttpRequest) -> HttpResponse:
    next_url = request.POST.get("next") or request.GET.get("next") or "/"
    if not url_has_allowed_host_and_scheme(next_url, allowed_hosts={request.get_host()}):
        next_url = "/"
    form = AuthenticationForm(request, data=request.POST if request.method == "POST" else None)
    throttled = False
    if request.method == "POST":
        username = str(request.POST.get("username", ""))
        remote = request.META.get("REMOTE_ADDR", "")
        if sign_in_throttled(username=username, remote_addr=remote):
            throttled = True
            form.errors.clear()
        elif form.is_valid():
            login(request, form.get_user())
            audit_record(request=request, action="sign_in", target_type="user", target_id=username)
            return redirect(next_url)
        else:
            sign_in_failure_record(request=request, username=username)
    status = 429 if throttled else 200
    return render(
        request,
        "console/sign_in.html",
        {
            "form": form,
            "next": next_url,
            "throttled": throttled,
            "window_minutes": settings.KEEPER_LOGIN_WINDOW // 60,
        },
        status=status,
    )


@require_POST
def sign_out(request: HtmxHttpRequest) -> HttpResponse:
    if request.user.is_authenticated:
        audit_record(
            request=request, action="sign_out", target_type="user", target_id=request.user.get_username()
        )
    logout(request)
    return redirect("console:sign_in")


@login_required
def home(request: HtmxHttpRequest) -> HttpResponse:
    roles = user_roles(request.user)
    for role, target in (
        (SUPPORT, "console:support_inbox"),
        (ENGINEER, "console:run_list"),
        (COMPLIANCE, "console:compliance_home"),
    ):
        if role in roles:
            return redirect(target)
    return render(request, "console/no_role.html", status=403)


@role_required(SUPPORT, COMPLIANCE, ENGINEER)
def audit_log(request: HtmxHttpRequest) -> HttpResponse:
    """The audit entries of the user's tenants and the user's own (sign-ins); a superuser sees all.
    Keyset pages newest first: `before` is the id the next page starts below."""
    target = request.GET.get("target", "")[:200]
    before = request.GET.get("before", "")
    page = audit_entry_page(
        tenant_ids=None if request.user.is_superuser else tenant_ids_for_user(request.user),
        actor=actor_of(request),
        target=target,
        cursor=int(before) if before.isdecimal() and len(before) < 19 else None,
        limit=AUDIT_PAGE,
    )
    older = page.next_cursor[0] if page.next_cursor else None
    context = {"page": page, "target": target, "older": older, "first": bool(before)}
    return render(request, "console/audit_log.html", context)
