"""Template context for every console page: the signed-in user's roles (to show the right links;
the server checks the role again on every request)."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest

from console.roles import user_roles


def console_roles(request: HttpRequest) -> dict[str, Any]:
    return {"roles": user_roles(request.user) if hasattr(request, "user") else set()}
