"""Sign-in throttling shared by the console's sign-in and the admin's: the same counters (failed
sign-ins in the audit log) and the same limits.

A client (its address) is refused a user name after KEEPER_LOGIN_MAX_FAILURES failures with it within
KEEPER_LOGIN_WINDOW seconds, and every name after four times as many failures. The count is per
client and name, never per name alone: anyone who knows a user name (`admin`) could otherwise lock
its owner out by failing on purpose, and the owner signing in from another address still can. What
this does not slow is guessing one name's password from many addresses at once: strong passwords
(Django's validators) answer that.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django import forms
from django.conf import settings
from django.contrib.admin.forms import AdminAuthenticationForm
from django.http import HttpRequest
from django.utils import timezone
from django.utils.functional import lazy

from console.audit import audit_record
from console.models import AuditEntry

FAILED = "sign_in_failed"


def sign_in_throttled(*, username: str, remote_addr: str) -> bool:
    """Whether this client failed with this user name too often lately (or with any, at four times
    the limit)."""
    since = timezone.now() - timedelta(seconds=settings.KEEPER_LOGIN_WINDOW)
    # the address as the audit entry keeps it (console.audit)
    failures = AuditEntry.objects.filter(action=FAILED, at__gte=since, remote_addr=remote_addr[:64])
    return (
        failures.filter(details__username=username.lower()[:150]).count()
        >= settings.KEEPER_LOGIN_MAX_FAILURES
        or failures.count() >= settings.KEEPER_LOGIN_MAX_FAILURES * 4
    )


def sign_in_failure_record(*, request: HttpRequest, username: str, via: str = "") -> AuditEntry:
    details = {"username": username.lower()[:150], **({"via": via} if via else {})}
    return audit_record(
        request=request,
        action=FAILED,
        actor="anonymous",
        target_type="user",
        target_id=username[:150],
        details=details,
    )


def sign_in_throttled_message() -> str:
    return f"Too many failed sign-ins. Try again in {settings.KEEPER_LOGIN_WINDOW // 60} minutes."


class ThrottledAdminAuthenticationForm(AdminAuthenticationForm):
    """The admin's sign-in form, throttled and audited like the console's: a throttled user name is
    refused before its password is even checked, and each failure is an audit entry."""

    error_messages = {
        **AdminAuthenticationForm.error_messages,
        "throttled": lazy(sign_in_throttled_message, str)(),
    }

    def clean(self) -> dict[str, Any]:
        username = str(self.data.get("username", ""))
        remote = self.request.META.get("REMOTE_ADDR", "") if self.request else ""
        if sign_in_throttled(username=username, remote_addr=remote):
            raise forms.ValidationError(sign_in_throttled_message(), code="throttled")
        try:
            cleaned = super().clean()
        except forms.ValidationError:
            if self.request is not None:
                sign_in_failure_record(request=self.request, username=username, via="admin")
            raise
        if self.request is not None:
            audit_record(
                request=self.request,
                action="sign_in",
                actor=f"user:{username}",
                target_type="user",
                target_id=username,
                details={"via": "admin"},
            )
        return cleaned
