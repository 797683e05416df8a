"""Production settings refuse insecure values with a clear message, and set the secure defaults.

Settings are process-wide, so each case imports them in a fresh interpreter with its own env.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings

import pytest

from core.processes import ROOT

SECURE = {
    "DJANGO_SETTINGS_MODULE": "config.settings.production",
    "SECRET_KEY": "k" * 20 + "-production-test-0123456789",
    "KEEPER_DIGEST_KEY": "g" * 20 + "-production-test-0123456789",
    "ALLOWED_HOSTS": "keeper.example.com",
    "DATABASE_URL": "postgresql://keeper@db.invalid/keeper",
    "REDIS_URL": "redis://redis.invalid:6379/0",
}

PROBE = """
import json, django
from django.conf import settings
django.setup()
print(json.dumps({name: getattr(settings, name) for name in (
    "DEBUG", "ALLOWED_HOSTS", "SESSION_COOKIE_SECURE", "CSRF_COOKIE_SECURE", "SECURE_SSL_REDIRECT",
    "SECURE_HSTS_SECONDS", "SECURE_HSTS_INCLUDE_SUBDOMAINS", "SECURE_PROXY_SSL_HEADER",
    "SECURE_REDIRECT_EXEMPT", "STORAGES", "KEEPER_LOG_FORMAT", "KEEPER_METRICS_TOKEN")}, default=str))
"""


def _load(env: dict[str, str | None], code: str = PROBE) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith(("KEEPER_", "SECURE_", "DJANGO_"))}
    full.update({"PATH": os.environ.get("PATH", "")})
    for name in ("DEBUG", "ALLOWED_HOSTS", "SECRET_KEY"):
        full.pop(name, None)
    for name, value in {**SECURE, **env}.items():
        if value is None:
            full.pop(name, None)
        else:
            full[name] = value
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=full, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"DEBUG": "true"}, "DEBUG must be off in production"),
        ({"SECRET_KEY": None}, "SECRET_KEY must be set"),
        ({"SECRET_KEY": "too-short"}, "SECRET_KEY must be set"),
        ({"SECRET_KEY": "insecure-" + "x" * 40}, "SECRET_KEY must be set"),
        ({"SECRET_KEY": "CHANGE-ME-to-a-random-value-of-at-least-32-characters"}, "placeholder"),
        ({"KEEPER_DIGEST_KEY": None}, "KEEPER_DIGEST_KEY must be set"),
        (
            {"KEEPER_DIGEST_KEY": "CHANGE-ME-to-another-random-value-of-32-characters"},
            "KEEPER_DIGEST_KEY must be set",
        ),
        ({"ALLOWED_HOSTS": None}, "ALLOWED_HOSTS must be set in production"),
        ({"ALLOWED_HOSTS": " , "}, "ALLOWED_HOSTS must be set in production"),
        ({"ALLOWED_HOSTS": "*"}, "not '*'"),
        ({"KEEPER_LOG_FORMAT": "xml"}, "KEEPER_LOG_FORMAT must be json or plain"),
    ],
    ids=[
        "debug",
        "no-key",
        "short-key",
        "insecure-key",
        "placeholder-key",
        "no-digest-key",
        "placeholder-digest-key",
        "no-hosts",
        "empty-hosts",
        "wildcard-host",
        "log-format",
    ],
)
def test_insecure_production_settings_are_refused_with_a_clear_message(env, message):
    result = _load(env)
    assert result.returncode != 0
    assert "django.core.exceptions.ImproperlyConfigured" in result.stderr
    assert message in result.stderr.strip().splitlines()[-1]


def test_secure_production_settings_load_with_secure_defaults():
    result = _load({})
    assert result.returncode == 0, result.stderr
    loaded = json.loads(result.stdout)
    assert loaded["DEBUG"] is False
    assert loaded["ALLOWED_HOSTS"] == ["keeper.example.com", "localhost", "127.0.0.1"]
    assert loaded["SESSION_COOKIE_SECURE"] and loaded["CSRF_COOKIE_SECURE"]
    assert loaded["SECURE_SSL_REDIRECT"] is False  # the TLS proxy redirects; opt in with the env
    assert loaded["SECURE_HSTS_SECONDS"] == 31536000 and loaded["SECURE_HSTS_INCLUDE_SUBDOMAINS"]
    assert (
        loaded["STORAGES"]["staticfiles"]["BACKEND"]
        == "whitenoise.storage.CompressedManifestStaticFilesStorage"
    )
    assert loaded["KEEPER_LOG_FORMAT"] == "json" and loaded["KEEPER_METRICS_TOKEN"] == ""


def test_ssl_redirect_spares_the_probes_and_logs_are_json():
    code = """
import json, logging, django
django.setup()
from django.test import Client
client = Client(HTTP_HOST="localhost")  # as the container health check asks
logging.getLogger("keeper.check").warning("hello %s", "prod")
print(json.dumps({"healthz": client.get("/healthz").status_code,
                  "console": client.get("/runs/").status_code}))
"""
    result = _load({"SECURE_SSL_REDIRECT": "true", "SECURE_HSTS_SECONDS": "60"}, code)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.strip().splitlines()[-1]) == {"healthz": 200, "console": 301}
    record = json.loads(next(line for line in result.stderr.splitlines() if "keeper.check" in line))
    assert record["message"] == "hello prod" and record["level"] == "WARNING"
    assert record["logger"] == "keeper.check" and record["time"].endswith("+00:00")


def test_whitenoise_does_not_warn_about_a_missing_staticfiles_folder_in_tests(settings):
    from whitenoise.middleware import WhiteNoiseMiddleware

    assert settings.WHITENOISE_USE_FINDERS and settings.WHITENOISE_AUTOREFRESH
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        WhiteNoiseMiddleware(lambda request: None)
    assert not [w for w in caught if "No directory at" in str(w.message)]
