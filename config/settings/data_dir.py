"""KEEPER_DATA_DIR's one default, read by the settings and by the entry points that start the
embedded services before Django exists (`make run`'s launcher, manage.py)."""

from __future__ import annotations

from pathlib import Path

from config.env import env_str


def data_dir() -> Path:
    """The embedded services, artifacts and the admin password file (default: .data in the checkout)."""
    return Path(env_str("KEEPER_DATA_DIR", str(Path(__file__).resolve().parents[2] / ".data")))
