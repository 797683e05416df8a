"""Development and the default install: embedded PostgreSQL and Redis under .data/ when unset."""

from __future__ import annotations

import os
from pathlib import Path

from config.embedded import ensure_services

_data_dir = Path(os.environ.get("KEEPER_DATA_DIR") or Path(__file__).resolve().parents[2] / ".data")
EMBEDDED_SERVICES = ensure_services(_data_dir)

from config.settings.base import *  # noqa: E402,F403
from config.settings.base import env_bool, env_str  # noqa: E402

DEBUG = env_bool("DEBUG", True)
SECRET_KEY = env_str("SECRET_KEY") or "insecure-local-development-key-do-not-use-in-production"
# Serve static files from the apps' folders (no collectstatic locally, so no staticfiles/ folder).
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = True
