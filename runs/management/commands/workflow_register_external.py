"""python manage.py workflow_register_external NAME VERSION --steps a,b,c [--tool NAME=VERSION] [--input-schema JSON]"""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from core.errors import ApplicationError
from core.tenancy import tenant_get
from runs.external.workflows import external_workflow_register


class Command(BaseCommand):
    help = (
        "Register an external workflow for a tenant: Keeper keeps its runs; your own workers run its steps."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("name")
        parser.add_argument("version")
        parser.add_argument(
            "--steps", required=True, help="comma-separated step names; the first starts a run"
        )
        parser.add_argument("--tenant", default="demo", help="the tenant's slug or id (default: demo)")
        parser.add_argument(
            "--tool", action="append", default=[], help="a tool its operations use, NAME=VERSION (repeatable)"
        )
        parser.add_argument(
            "--input-schema", default=None, help="a JSON Schema (JSON text) every input must pass"
        )
        parser.add_argument(
            "--approval-guarded",
            default="",
            help="comma-separated steps that act on an approval in the state",
        )
        parser.add_argument(
            "--signals", default="", help="comma-separated names of the signals its runs accept"
        )
        parser.add_argument("--description", default="")

    def handle(self, *args: Any, **o: Any) -> None:
        tools = []
        for tool in o["tool"]:
            name, sep, version = tool.partition("=")
            if not sep or not name or not version:
                raise CommandError(f"--tool takes NAME=VERSION, not {tool!r}")
            tools.append({"name": name, "version": version})
        try:
            schema = json.loads(o["input_schema"]) if o["input_schema"] is not None else None
        except json.JSONDecodeError as exc:
            raise CommandError(f"--input-schema is not JSON: {exc}") from None
        try:
            registered = external_workflow_register(
                tenant=tenant_get(slug_or_id=o["tenant"]),
                name=o["name"],
                version=o["version"],
                steps=[s.strip() for s in o["steps"].split(",") if s.strip()],
                tools=tools,
                input_schema=schema,
                approval_guarded_steps=[s.strip() for s in o["approval_guarded"].split(",") if s.strip()],
                description=o["description"],
                signals=[s.strip() for s in o["signals"].split(",") if s.strip()],
                actor="cli",
            )
        except ApplicationError as exc:
            raise CommandError(f"{exc.code}: {exc.message}") from None
        wf = registered.workflow
        verb = "registered" if registered.created else "already registered"
        self.stdout.write(
            f"{wf.name} {wf.version} {verb} for tenant {o['tenant']}: steps {', '.join(wf.steps)}"
        )
