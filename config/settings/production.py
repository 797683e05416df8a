"""Production: real PostgreSQL and Redis from the environment; refuses insecure defaults."""

from __future__ import annotations

from config.settings.base import *  # noqa: F403
from config.settings.base import DEBUG, SECRET_KEY, ImproperlyConfigured, env_bool

if DEBUG:
    raise ImproperlyConfigured("DEBUG must be off in production")
if len(SECRET_KEY) < 32 or SECRET_KEY.startswith("insecure"):
    raise ImproperlyConfigured("SECRET_KEY must be set to a random value of at least 32 characters")

KEEPER_SANDBOX_ENABLED = env_bool("KEEPER_SANDBOX_ENABLED", False)  # the demo's fake payments API
SESSION_COOKIE_SECURE = True
CSRF_COOKIE_SECURE = True
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
