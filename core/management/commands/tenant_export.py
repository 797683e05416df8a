"""python manage.py tenant_export <slug> --out file.jsonl.gz: every row of a tenant, with a receipt."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from core.errors import ApplicationError
from core.offboarding import tenant_export
from core.tenancy import tenant_get


class Command(BaseCommand):
    help = "Export a tenant (runs, events, memory, documents, audit, LangGraph threads) to gzipped JSONL."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("slug", help="the tenant's slug or id")
        parser.add_argument("--out", required=True, help="the file to write (.jsonl.gz)")
        parser.add_argument("--by", default="operator:manage.py", help="who asks (kept in the receipt)")

    def handle(self, *args: Any, **options: Any) -> None:
        out = Path(options["out"])
        if not out.parent.is_dir():
            raise CommandError(f"no directory {out.parent}")
        try:
            tenant = tenant_get(slug_or_id=options["slug"])
            done = tenant_export(
                tenant=tenant, out=out, requested_by=options["by"], progress=self.stderr.write
            )
        except ApplicationError as error:
            raise CommandError(error.message) from None
        self.stderr.write(f"wrote {out} sha256 {done.export_digest}")
        self.stdout.write(json.dumps(done.receipt, indent=2, sort_keys=True))
