"""Keeper's URL map: the console, the admin and the REST API."""

from django.contrib import admin
from django.urls import include, path, re_path

from core.api import api_not_found

urlpatterns = [
    path("admin/", admin.site.urls),
    path("", include("core.urls_ops")),
    path("api/", include("config.urls_api_schema")),
    path("api/v1/", include("runs.api_urls")),
    path("api/v1/", include("memory.urls")),
    path("api/v1/", include("retrieval.urls")),
    # After every API include: anything under api/v1/ that no route matched is a 404 with the error body.
    re_path(r"^api/v1/(?P<path>[\s\S]*)$", api_not_found, name="api-not-found"),  # newlines too
    path("sandbox/", include("sandbox.urls")),
    path("", include("console.urls")),
]
