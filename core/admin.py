from django.contrib import admin

from core.models import Tenant


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
    list_display = ["slug", "name", "tenant_id", "created_at"]
    search_fields = ["slug", "name", "tenant_id"]
    readonly_fields = ["tenant_id", "created_at"]
