"""Keeper's URL map: the console, the admin and the REST API."""

from django.contrib import admin
from django.urls import include, path, re_path

from console.views import errors
from core.api import api_not_found

urlpatterns = [
    path("favicon.ico", errors.favicon, name="favicon"),
    path("admin/", admin.site.urls),
    path("", include("core.urls_ops")),
    path("api/", include("config.urls_api_schema")),
    path("api/v1/", include("runs.api_urls")),
    path("api/v1/", include("memory.urls")),
    path("api/v1/", include("erasure.urls")),
    path("api/v1/", include("retrieval.urls")),
    # After every API include: anything under api/v1/ that no route matched is a 404 with the error body.
    re_path(r"^api/v1/(?P<path>[\s\S]*)$", api_not_found, name="api-not-found"),  # newlines too
    path("sandbox/", include("sandbox.urls")),
    path("", include("console.urls")),
]

# The error pages keep the navigation and say why (templates/403.html, 404.html, 500.html).
handler500 = "console.views.errors.server_error"
