"""Development and the default install; the embedded services are started by `make run` or manage.py."""

from __future__ import annotations

from config.settings.base import *  # noqa: F403
from config.settings.base import env_bool, env_str

DEBUG = env_bool("DEBUG", True)
SECRET_KEY = env_str("SECRET_KEY") or "insecure-local-development-key-do-not-use-in-production"
KEEPER_DIGEST_KEY = env_str("KEEPER_DIGEST_KEY") or "insecure-local-digest-key-do-not-use-in-production"
# Serve static files from the apps' folders (no collectstatic locally, so no staticfiles/ folder).
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = True
