"""Evaluations for engineers: the tenants' evaluation sets, keeping a run in one, running a set again
with another model, prompt or backend, and each round's table of outcomes (replay beside original).
Every change is audited; the replays answer side effects from the originals' records."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from django import forms
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST, require_safe

from console.audit import actor_of, audit_record
from console.roles import ENGINEER, role_required, tenant_for_user, user_tenants
from core.errors import ApplicationError
from core.tenancy import tenant_bind
from runs.engine.replay_models import EvalSet
from runs.evaluation.overrides import CHOICES
from runs.evaluation.selectors import eval_set_members, eval_sets_list, round_get, round_table, rounds_recent
from runs.evaluation.services import eval_round_start, eval_set_create, eval_set_run_add

NO_CHANGE = ""


def _choices(part: str) -> list[tuple[str, str]]:
    return [(NO_CHANGE, "as configured"), *((c, c) for c in CHOICES[part] if c != "model")]


class SetForm(forms.Form):
    tenant = forms.ChoiceField()
    name = forms.CharField(max_length=200)
    description = forms.CharField(max_length=2000, required=False, widget=forms.Textarea(attrs={"rows": 2}))

    def __init__(self, data: Any = None, *, tenants: list[Any]) -> None:
        super().__init__(data)
        self.fields["tenant"].choices = [(t.slug, t.slug) for t in tenants]  # type: ignore[attr-defined]


class AddRunForm(forms.Form):
    run_id = forms.UUIDField(label="Run id")
    at_seq = forms.IntegerField(min_value=1, required=False, label="Fork at seq (default 1)")


class RoundForm(forms.Form):
    support_model = forms.ChoiceField(
        choices=_choices("support_model"), required=False, label="Support model"
    )
    compactor = forms.ChoiceField(choices=_choices("compactor"), required=False)
    decider = forms.ChoiceField(choices=_choices("decider"), required=False)
    prompt = forms.CharField(max_length=10_000, required=False, widget=forms.Textarea(attrs={"rows": 2}))
    label = forms.CharField(max_length=200, required=False)

    def overrides(self) -> dict[str, Any]:
        data = self.cleaned_data
        backends = {p: data[p] for p in ("support_model", "compactor", "decider") if data.get(p)}
        overrides: dict[str, Any] = {"backends": backends} if backends else {}
        if data.get("prompt"):
            overrides["prompt"] = data["prompt"]
        return overrides


def _tenant_ids(request: HttpRequest) -> list[UUID]:
    return [t.tenant_id for t in user_tenants(request.user)]


def _set_of(request: HttpRequest, set_id: UUID) -> EvalSet:
    found = (
        EvalSet.objects.filter(set_id=set_id, tenant_id__in=_tenant_ids(request))
        .select_related("tenant")
        .first()
    )
    if found is None:
        raise Http404("no such evaluation set")
    return found


def _page(
    request: HttpRequest, *, status: int = 200, error: str = "", set_form: SetForm | None = None
) -> HttpResponse:
    ids = _tenant_ids(request)
    sets = [(s, eval_set_members(eval_set=s)) for s in eval_sets_list(tenant_ids=ids)]
    context = {
        "sets": sets,
        "rounds": rounds_recent(tenant_ids=ids, limit=20),
        "set_form": set_form or SetForm(tenants=list(user_tenants(request.user))),
        "add_form": AddRunForm(),
        "round_form": RoundForm(),
        "error": error,
    }
    return render(request, "console/engineer/evaluations.html", context, status=status)


@role_required(ENGINEER)
@require_safe
def evaluation_list(request: HttpRequest) -> HttpResponse:
    return _page(request)


@role_required(ENGINEER)
@require_POST
def evaluation_set_create(request: HttpRequest) -> HttpResponse:
    form = SetForm(request.POST, tenants=list(user_tenants(request.user)))
    if not form.is_valid():
        return _page(request, status=422, set_form=form)
    tenant = tenant_for_user(request.user, form.cleaned_data["tenant"])
    try:
        created = eval_set_create(
            tenant=tenant,
            name=form.cleaned_data["name"],
            description=form.cleaned_data["description"],
            actor=actor_of(request),
        )
    except ApplicationError as exc:
        return _page(request, status=exc.http_status, error=exc.message, set_form=form)
    audit_record(
        request=request,
        action="eval_set_create",
        tenant=tenant,
        target_type="eval_set",
        target_id=created.set_id,
        details={"name": created.name},
    )
    return redirect("console:evaluation_list")


@role_required(ENGINEER)
@require_POST
def evaluation_set_add(request: HttpRequest, set_id: UUID) -> HttpResponse:
    eval_set = _set_of(request, set_id)
    form = AddRunForm(request.POST)
    if not form.is_valid():
        return _page(request, status=422, error="give a run id and, optionally, a seq of 1 or more")
    try:
        with tenant_bind(eval_set.tenant_id):
            member = eval_set_run_add(
                eval_set=eval_set,
                run_id=form.cleaned_data["run_id"],
                at_seq=form.cleaned_data["at_seq"],
                actor=actor_of(request),
            )
    except ApplicationError as exc:
        return _page(request, status=exc.http_status, error=exc.message)
    audit_record(
        request=request,
        action="eval_set_add_run",
        tenant=eval_set.tenant,
        target_type="eval_set",
        target_id=eval_set.set_id,
        details={"run_id": str(member.run_id), "at_seq": member.at_seq},
    )
    return redirect("console:evaluation_list")


@role_required(ENGINEER)
@require_POST
def evaluation_set_run(request: HttpRequest, set_id: UUID) -> HttpResponse:
    eval_set = _set_of(request, set_id)
    form = RoundForm(request.POST)
    if not form.is_valid():
        return _page(
            request,
            status=422,
            error="; ".join(f"{k}: {' '.join(str(e) for e in v)}" for k, v in form.errors.items()),
        )
    try:
        with tenant_bind(eval_set.tenant_id):
            eval_round = eval_round_start(
                actor=actor_of(request),
                overrides=form.overrides(),
                eval_set=eval_set,
                label=form.cleaned_data["label"],
            )
    except ApplicationError as exc:
        return _page(request, status=exc.http_status, error=exc.message)
    audit_record(
        request=request,
        action="eval_round_start",
        tenant=eval_set.tenant,
        target_type="eval_round",
        target_id=eval_round.round_id,
        details={"set": eval_set.name, "overrides": eval_round.overrides},
    )
    return redirect("console:evaluation_round", round_id=eval_round.round_id)


@role_required(ENGINEER)
@require_safe
def evaluation_round(request: HttpRequest, round_id: UUID) -> HttpResponse:
    found = round_get(tenant_ids=_tenant_ids(request), round_id=round_id)
    if found is None:
        raise Http404("no such evaluation round")
    with tenant_bind(found.tenant_id):
        table = round_table(eval_round=found)
    return render(
        request, "console/engineer/evaluation_round.html", {"table": table, "totals": table.totals()}
    )
