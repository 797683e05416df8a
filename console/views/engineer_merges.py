"""Merging a branch back from the console: merge a fork into its parent (or another run of its tree),
and the page where a person resolves a merge's conflicts, one pick (ours, theirs, or edited text) per
conflict, or abandons it. Each action is a POST of an engineer, audited with the service's change in
one transaction; a refusal shows the service's reason with its 4xx status and records nothing."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from django import forms
from django.contrib import messages
from django.db import transaction
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from console.audit import actor_of, audit_record
from console.htmx import HtmxHttpRequest
from console.roles import ENGINEER, role_required, run_for_user
from console.views.engineer_bulk import _refused
from core.errors import ApplicationError
from runs.engine.merge_rules import MergePick
from runs.engine.merges import merge_abandon, merge_resolve, run_merge
from runs.engine.workspace_models import MergeStatus, WorkspaceMerge

MAX_EDITED = 1_000_000


class MergeForm(forms.Form):
    into = forms.UUIDField(required=False)


def _audit(request: HtmxHttpRequest, merge: WorkspaceMerge, action: str, **details: Any) -> None:
    audit_record(
        request=request,
        action=action,
        tenant=merge.target.tenant,
        target_type="run",
        target_id=merge.target_id,
        details={"merge_id": str(merge.merge_id), "source_run_id": str(merge.source_id), **details},
    )


@role_required(ENGINEER)
@require_POST
def run_merge_view(request: HtmxHttpRequest, run_id: UUID) -> HttpResponse:
    """Merge this run into its parent (or the run named in `into`, of the user's tenants)."""
    run = run_for_user(request.user, run_id)
    form = MergeForm(request.POST)
    if not form.is_valid():
        return _refused(request, run.run_id, "Merge refused: name the run to merge into by its id", 422)
    into = form.cleaned_data["into"]
    if into is not None:
        run_for_user(request.user, into)  # another tenant's run: 404
    try:
        with transaction.atomic():
            merge = run_merge(run_id=run.run_id, into_run_id=into, actor=actor_of(request))
            _audit(request, merge, "merge", status=merge.status, conflicts=len(merge.conflicts))
    except ApplicationError as exc:
        return _refused(request, run.run_id, f"Merge refused: {exc.message}", exc.http_status)
    if merge.status == MergeStatus.APPLIED:
        messages.success(
            request,
            f"run {run.run_id} was merged into this run: its new workspace is event {merge.result_seq}",
        )
        return redirect("console:run_detail", run_id=merge.target_id)
    messages.info(request, f"the merge has {len(merge.conflicts)} conflict(s) to resolve")
    return redirect("console:run_merge_page", run_id=merge.target_id, merge_id=merge.merge_id)


def _merge_for(request: HtmxHttpRequest, run_id: UUID, merge_id: UUID) -> WorkspaceMerge:
    run = run_for_user(request.user, run_id)
    merge = (
        WorkspaceMerge.objects.select_related("target__tenant")
        .filter(tenant_id=run.tenant_id, target_id=run.run_id, merge_id=merge_id)
        .first()
    )
    if merge is None:
        raise Http404("no such merge")
    return merge


def _picks(request: HtmxHttpRequest, merge: WorkspaceMerge) -> tuple[dict[str, MergePick], list[str]]:
    """The form's pick for each conflict (`take-N`, `text-N` by its place in the list), and what is wrong."""
    picks: dict[str, MergePick] = {}
    errors: list[str] = []
    for n, conflict in enumerate(merge.conflicts):
        take = request.POST.get(f"take-{n}", "")
        text = request.POST.get(f"text-{n}", "")
        if take not in ("ours", "theirs", "edited"):
            errors.append(f"{conflict['path']}: pick ours, theirs or edited text")
        elif len(text) > MAX_EDITED:
            errors.append(f"{conflict['path']}: the edited text is over {MAX_EDITED} characters")
        else:
            picks[conflict["id"]] = MergePick(take, text)  # type: ignore[arg-type]
    return picks, errors


def _page(
    request: HtmxHttpRequest,
    merge: WorkspaceMerge,
    *,
    errors: tuple[str, ...] | list[str] = (),
    status: int = 200,
) -> HttpResponse:
    rows = [
        {
            "n": n,
            **c,
            "picked": request.POST.get(f"take-{n}", ""),
            "text": request.POST.get(f"text-{n}", c.get("ours") or ""),
        }
        for n, c in enumerate(merge.conflicts)
    ]
    context = {"merge": merge, "run": merge.target, "conflicts": rows, "errors": list(errors)}
    return render(request, "console/engineer/merge.html", context, status=status)


@role_required(ENGINEER)
@require_http_methods(["GET", "POST"])
def run_merge_page(request: HtmxHttpRequest, run_id: UUID, merge_id: UUID) -> HttpResponse:
    """GET: the merge, its conflicts (base, ours, theirs) and a pick for each; POST: resolve them."""
    merge = _merge_for(request, run_id, merge_id)
    if request.method != "POST":
        return _page(request, merge)
    if merge.status != MergeStatus.CONFLICTS:
        return _page(
            request, merge, errors=[f"this merge is {merge.status}: nothing is left to resolve"], status=409
        )
    picks, errors = _picks(request, merge)
    if errors:
        return _page(request, merge, errors=errors, status=422)
    try:
        with transaction.atomic():
            done = merge_resolve(
                tenant_id=merge.tenant_id, merge_id=merge.merge_id, picks=picks, actor=actor_of(request)
            )
            _audit(request, done, "merge_resolve", picks={k: p.take for k, p in picks.items()})
    except ApplicationError as exc:
        merge.refresh_from_db()
        return _page(request, merge, errors=[exc.message], status=exc.http_status)
    messages.success(request, f"the merge is applied: the run's new workspace is event {done.result_seq}")
    return redirect("console:run_detail", run_id=done.target_id)


@role_required(ENGINEER)
@require_POST
def run_merge_abandon(request: HtmxHttpRequest, run_id: UUID, merge_id: UUID) -> HttpResponse:
    merge = _merge_for(request, run_id, merge_id)
    try:
        with transaction.atomic():
            gone = merge_abandon(tenant_id=merge.tenant_id, merge_id=merge.merge_id, actor=actor_of(request))
            _audit(request, gone, "merge_abandon")
    except ApplicationError as exc:
        return _page(request, merge, errors=[exc.message], status=exc.http_status)
    messages.info(request, "the merge was abandoned: nothing of the branch was taken")
    return redirect("console:run_detail", run_id=gone.target_id)
