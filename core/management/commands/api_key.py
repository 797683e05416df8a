"""python manage.py api_key create|list|revoke: per-tenant API keys (the key is printed once)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from core.api_auth import api_key_create, api_key_revoke
from core.errors import ApplicationError
from core.models import ApiKey, ApiKeyScope, Tenant
from core.tenancy import tenant_get, tenant_scope


class Command(BaseCommand):
    help = "Create, list or revoke the API keys of a tenant."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        create = actions.add_parser("create", help="create a key and print it (only this once)")
        create.add_argument("--tenant", required=True, help="tenant slug or id")
        create.add_argument("--scope", required=True, choices=ApiKeyScope.values)
        create.add_argument("--name", required=True, help="what the key is for, e.g. ci")
        listing = actions.add_parser("list", help="list keys (prefixes only)")
        listing.add_argument("--tenant", help="tenant slug or id (default: all)")
        revoke = actions.add_parser("revoke", help="revoke a key by its prefix (or the whole key)")
        revoke.add_argument("prefix")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            getattr(self, f"_{options['action']}")(options)
        except ApplicationError as error:
            raise CommandError(error.message) from None

    def _create(self, options: dict[str, Any]) -> None:
        created = api_key_create(
            tenant=tenant_get(slug_or_id=options["tenant"]), name=options["name"], scope=options["scope"]
        )
        self.stderr.write(
            f"created {created.key.scope} key {created.key.name!r} for {created.key.tenant.slug}; "
            "it is shown only now:"
        )
        self.stdout.write(created.plaintext)

    def _list(self, options: dict[str, Any]) -> None:
        tenants = (
            [tenant_get(slug_or_id=options["tenant"])]
            if options.get("tenant")
            else Tenant.objects.order_by("slug")
        )
        for tenant in tenants:
            with tenant_scope(tenant.tenant_id):  # row-level security: each tenant's keys as that tenant
                keys = list(ApiKey.objects.filter(tenant=tenant).order_by("created_at"))
            for key in keys:
                state = f"revoked {key.revoked_at:%Y-%m-%d %H:%M}" if key.revoked_at else "active"
                self.stdout.write(
                    f"kp_{key.prefix}_…  {tenant.slug}  {key.scope:<5}  {key.name}  "
                    f"created {key.created_at:%Y-%m-%d %H:%M}  {state}"
                )

    def _revoke(self, options: dict[str, Any]) -> None:
        key = api_key_revoke(prefix=options["prefix"])
        self.stdout.write(f"revoked kp_{key.prefix}_… ({key.tenant.slug}, {key.name})")
