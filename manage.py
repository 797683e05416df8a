#!/usr/bin/env python
"""Django's command-line utility for Keeper; with the local settings it starts the embedded services."""

import os
import sys


def main() -> None:
    os.environ["DJANGO_SETTINGS_MODULE"] = (
        os.environ.get("DJANGO_SETTINGS_MODULE") or "config.settings.local"
    )  # empty: the default
    from django.core.exceptions import ImproperlyConfigured
    from django.core.management import execute_from_command_line

    try:
        if os.environ["DJANGO_SETTINGS_MODULE"] == "config.settings.local":
            # Settings start nothing: like `make run`, the entry point does. It attaches to the
            # services `make run` started under KEEPER_DATA_DIR (so `make shell` and `manage.py
            # start_run` beside it see the same data), or starts them for this command and stops
            # them when it exits.
            from config.embedded import ensure_services
            from config.settings.data_dir import data_dir

            ensure_services(data_dir().resolve())
        execute_from_command_line(sys.argv)
    except ImproperlyConfigured as exc:  # a setting's own message says what to fix: no traceback
        sys.exit(f"keeper: configuration error: {exc}")


if __name__ == "__main__":
    main()
