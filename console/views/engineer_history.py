"""The run's whole history as a JSON file from the run page (the export_history document), audited."""

from __future__ import annotations

import json
from uuid import UUID

from django.http import HttpResponse
from django.views.decorators.http import require_GET

from console.audit import audit_record
from console.htmx import HtmxHttpRequest
from console.roles import ENGINEER, role_required, run_for_user
from runs.operator.history import run_history_document


@role_required(ENGINEER)
@require_GET
def run_history_download(request: HtmxHttpRequest, run_id: UUID) -> HttpResponse:
    """The same document as `manage.py export_history` (import_history reads it back); who downloaded
    which run's history, and its digest, go to the audit log."""
    run = run_for_user(request.user, run_id)
    document = run_history_document(run_id=run.run_id)
    audit_record(
        request=request,
        action="export_history",
        tenant=run.tenant,
        target_type="run",
        target_id=run.run_id,
        details={"digest": document["digest"], "events": len(document["events"])},
    )
    response = HttpResponse(
        json.dumps(document, indent=1, sort_keys=True) + "\n", content_type="application/json; charset=utf-8"
    )
    response["Content-Disposition"] = f'attachment; filename="run-{run.run_id}-history.json"'
    return response
