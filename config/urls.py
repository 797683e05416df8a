"""Keeper's URL map: the console, the admin and the REST API."""

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("", include("core.urls_ops")),
    path("api/", include("config.urls_api_schema")),
    path("api/v1/", include("runs.api_urls")),
    path("api/v1/", include("memory.urls")),
    path("api/v1/", include("retrieval.urls")),
    path("sandbox/", include("sandbox.urls")),
    path("", include("console.urls")),
]
