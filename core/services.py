"""First-run set-up: a demo tenant and an administrator to sign in with."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model

from core.tenancy import tenant_ensure


@dataclass(frozen=True)
class SetupResult:
    tenant_slug: str
    admin_username: str | None
    admin_password_file: Path | None
    admin_created: bool


def keeper_setup(*, data_dir: Path, tenant_slug: str = "demo") -> SetupResult:
    """Idempotent. Creates the tenant, and an `admin` superuser if there is no superuser at all.

    The password comes from KEEPER_ADMIN_PASSWORD or is generated and written to a file only the
    owner can read; it is never printed to logs.
    """
    tenant_ensure(slug=tenant_slug, name=tenant_slug.title())
    users = get_user_model()
    if users.objects.filter(is_superuser=True).exists():
        existing = data_dir / "admin-password.txt"
        return SetupResult(tenant_slug, None, existing if existing.exists() else None, False)
    password = settings.KEEPER_ADMIN_PASSWORD or secrets.token_urlsafe(16)
    users.objects.create_superuser(username="admin", email="", password=password)
    password_file = None
    if not settings.KEEPER_ADMIN_PASSWORD:
        data_dir.mkdir(parents=True, exist_ok=True)
        password_file = data_dir / "admin-password.txt"
        password_file.touch(mode=0o600)
        password_file.write_text(password + "\n")
    return SetupResult(tenant_slug, "admin", password_file, True)
