"""The embedded PostgreSQL's own server settings (KEEPER_EMBEDDED_SHARED_BUFFERS), read by the settings
and by the entry points that start the embedded services before Django exists. A server given by
DATABASE_URL is configured by whoever runs it."""

from __future__ import annotations

import os
import re

from django.core.exceptions import ImproperlyConfigured

from config.env import env_str

MEMORY = re.compile(r"^[1-9][0-9]*(kB|MB|GB)$")
MB = 1024 * 1024


def default_shared_buffers() -> str:
    """A quarter of this machine's memory, at least PostgreSQL's own 128MB and at most 1GB: enough to
    keep a large tenant's chunk graph (147 MB at 150,000 chunks), its rows and the hot postings in the
    server's cache, which PostgreSQL's 128MB cannot (retrieval searches read from the OS page cache)."""
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # no sysconf (Windows) or no figure
        return "128MB"
    return f"{max(128, min(1024, memory // 4 // MB))}MB"


def embedded_postgres_settings() -> dict[str, str]:
    """The server settings the embedded PostgreSQL is started with (ALTER SYSTEM, config.embedded)."""
    shared_buffers = env_str("KEEPER_EMBEDDED_SHARED_BUFFERS", default_shared_buffers())
    if not MEMORY.match(shared_buffers):
        raise ImproperlyConfigured(
            f"KEEPER_EMBEDDED_SHARED_BUFFERS={shared_buffers!r} is not a size (use e.g. 512MB or 1GB)"
        )
    return {"shared_buffers": shared_buffers}
