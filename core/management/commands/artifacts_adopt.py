"""python manage.py artifacts_adopt [--root DIR]: record (or copy into the configured store) the blobs
stored before Keeper kept records of them, by the digests each tenant's rows name."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from core.artifacts.legacy import artifacts_adopt_legacy


class Command(BaseCommand):
    help = "Adopt blobs stored under an old artifact folder (<hh>/<hex> files) into the artifact store."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--root", help="the old folder (default: KEEPER_ARTIFACT_ROOT)")

    def handle(self, *args: Any, **options: Any) -> None:
        root = Path(options["root"] or settings.KEEPER_ARTIFACT_ROOT)
        if not root.is_dir():
            raise CommandError(f"no directory {root}")
        self.stdout.write(json.dumps(artifacts_adopt_legacy(root=root), sort_keys=True))
