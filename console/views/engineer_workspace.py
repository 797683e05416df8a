"""The engineer's workspace page: a run's files at a snapshot, and the diff between two snapshots."""

from __future__ import annotations

import difflib
from uuid import UUID

from django.http import HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_safe

from console.htmx import HtmxHttpRequest
from console.roles import ENGINEER, role_required, run_for_user
from runs.engine.workspace import workspace_file_text, workspace_files_at, workspace_snapshots


def _seq(raw: str | None) -> int | None:
    if raw in (None, ""):
        return None
    try:
        value = int(str(raw))
    except ValueError:
        raise ValueError(f"{raw!r} is not a revision number") from None
    if value < 1:
        raise ValueError("a revision is 1 or more")
    return value


@role_required(ENGINEER)
@require_safe
def run_workspace(request: HtmxHttpRequest, run_id: UUID) -> HttpResponse:
    """GET ?at=<seq> shows the files as event <seq> left them (as far as snapshots saved them); &diff=<seq>
    diffs against another."""
    run = run_for_user(request.user, run_id)  # another tenant's run: 404
    try:
        at, against = _seq(request.GET.get("at")), _seq(request.GET.get("diff"))
    except ValueError as exc:
        context = {"run": run, "error": str(exc), "snapshots": workspace_snapshots(run_id=run.run_id)}
        return render(request, "console/engineer/workspace.html", context, status=422)
    seq, files = workspace_files_at(run_id=run.run_id, seq=at)
    rows = [
        {"path": p, "size": ref.get("size"), "digest": ref.get("digest")} for p, ref in sorted(files.items())
    ]
    diffs: list[dict[str, object]] = []
    diff_seq = None
    if against is not None:
        diff_seq, old = workspace_files_at(run_id=run.run_id, seq=against)
        for path in sorted(set(old) | set(files)):
            a, b = old.get(path), files.get(path)
            if a is not None and b is not None and a.get("digest") == b.get("digest"):
                continue
            before = workspace_file_text(tenant_id=run.tenant_id, ref=a).splitlines() if a else []
            after = workspace_file_text(tenant_id=run.tenant_id, ref=b).splitlines() if b else []
            lines = list(
                difflib.unified_diff(before, after, f"{path}@{diff_seq}", f"{path}@{seq}", lineterm="")
            )
            diffs.append({"path": path, "lines": lines})
    shown = [
        {"path": path, "text": workspace_file_text(tenant_id=run.tenant_id, ref=ref, limit=20_000)}
        for path, ref in sorted(files.items())[:50]
    ]
    context = {
        "run": run,
        "snapshots": workspace_snapshots(run_id=run.run_id),
        "seq": seq,
        "rows": rows,
        "shown": shown,
        "diff_seq": diff_seq,
        "diffs": diffs,
        "asked_diff": against is not None,
    }
    return render(request, "console/engineer/workspace.html", context)
