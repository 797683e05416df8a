"""Production: real PostgreSQL and Redis from the environment; refuses insecure defaults.

Keeper is meant to run behind a TLS-terminating proxy that sets X-Forwarded-Proto. The proxy
normally redirects http to https itself, so SECURE_SSL_REDIRECT is off unless asked for; the
health and metrics paths are exempt from it either way (probes speak plain http inside).
"""

from __future__ import annotations

import os

from config.settings.base import *  # noqa: F403
from config.settings.base import (
    DEBUG,
    KEEPER_DIGEST_KEY,
    LOGGING,
    SECRET_KEY,
    ImproperlyConfigured,
    env_bool,
    env_int,
    env_str,
)

if DEBUG:
    raise ImproperlyConfigured("DEBUG must be off in production (unset DEBUG or set DEBUG=false)")
if len(SECRET_KEY) < 32 or SECRET_KEY.startswith("insecure") or "CHANGE-ME" in SECRET_KEY:
    raise ImproperlyConfigured(
        "SECRET_KEY must be set to a random value of at least 32 characters (not the example's placeholder)"
    )

if (
    len(KEEPER_DIGEST_KEY) < 32
    or KEEPER_DIGEST_KEY.startswith("insecure")
    or "CHANGE-ME" in KEEPER_DIGEST_KEY
):
    raise ImproperlyConfigured(
        "KEEPER_DIGEST_KEY must be set to a random value of at least 32 characters (not the example's "
        "placeholder): it keys the digests that stand in for erased subjects. Keep it: never rotate it"
    )

_hosts = [h.strip() for h in os.environ.get("ALLOWED_HOSTS", "").split(",") if h.strip()]
if not _hosts:
    raise ImproperlyConfigured(
        "ALLOWED_HOSTS must be set in production: the comma-separated host names Keeper is served "
        "under (e.g. keeper.example.com)"
    )
if "*" in _hosts:
    raise ImproperlyConfigured("ALLOWED_HOSTS must name the hosts in production, not '*'")
# Container health checks ask http://localhost:8000/healthz from inside; a Host header of
# localhost cannot be used to poison links, so it is always accepted.
ALLOWED_HOSTS = [*_hosts, *(h for h in ("localhost", "127.0.0.1") if h not in _hosts)]
CSRF_TRUSTED_ORIGINS = [o for o in env_str("CSRF_TRUSTED_ORIGINS").split(",") if o]

KEEPER_SANDBOX_ENABLED = env_bool("KEEPER_SANDBOX_ENABLED", False)  # the demo's fake payments API

SESSION_COOKIE_SECURE = True
CSRF_COOKIE_SECURE = True
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", False)
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$", r"^metrics$"]
# HSTS: a year by default; SECURE_HSTS_SECONDS=0 turns it off (e.g. while trying a new domain).
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 31536000)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", True)
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", False)
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"

# Hashed, compressed static files collected at build time (`collectstatic` in the Dockerfile).
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}

_log_format = env_str("KEEPER_LOG_FORMAT", "json")
if _log_format not in ("json", "plain"):
    raise ImproperlyConfigured(f"KEEPER_LOG_FORMAT must be json or plain, not {_log_format!r}")
KEEPER_LOG_FORMAT = _log_format
LOGGING["handlers"]["console"]["formatter"] = _log_format
