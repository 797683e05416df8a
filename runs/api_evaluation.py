"""REST API for evaluations: replay a run with overrides, keep runs in evaluation sets, run a set again,
read a round's table and a replay beside its original. One view per action."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from drf_spectacular.utils import OpenApiExample, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api import ClosedSerializer, QuerySerializer, StrictCharField, StrictIntegerField, error_responses
from core.api_auth import request_actor, request_key, request_may_see, request_tenant, session_tenant_ids
from core.errors import NotFound
from core.roles import ENGINEER
from core.tenancy import tenant_bind
from runs.api import run_for_request
from runs.engine.replay_models import EvalSet
from runs.evaluation.selectors import (
    eval_set_members,
    eval_sets_list,
    replay_compare,
    replay_of,
    round_get,
    round_table,
    rounds_recent,
)
from runs.evaluation.services import eval_round_start, eval_set_create, eval_set_run_add

OVERRIDES_HELP = (
    'what the replays change: {"backends": {"support_model": "rules-no-refunds" | {"choice": "model", '
    '"options": {"model": ..., "base_url": ...}}, "compactor": ..., "decider": ...}, "prompt": text, '
    '"tools": {tool: [{"arguments": {...}, "result": {...}}]}}'
)
ROUND = inline_serializer(
    "EvaluationRound",
    {
        "round_id": serializers.UUIDField(),
        "set_id": serializers.UUIDField(allow_null=True),
        "label": serializers.CharField(),
        "overrides": serializers.JSONField(),
        "started_by": serializers.CharField(),
        "created_at": serializers.DateTimeField(),
        "settled": serializers.BooleanField(),
        "totals": serializers.JSONField(),
        "rows": serializers.ListField(child=serializers.JSONField()),
    },
)
COMPARISON = inline_serializer("ReplayComparison", {"comparison": serializers.JSONField()})


def _tenant_ids(request: Request) -> list[UUID]:
    key = request_key(request)
    return [key.tenant_id] if key is not None else session_tenant_ids(request.user)


def _set_for_request(request: Request, set_id: UUID) -> EvalSet:
    found = EvalSet.objects.filter(set_id=set_id, tenant_id__in=_tenant_ids(request)).first()
    if found is None or not request_may_see(request, found.tenant_id):
        raise NotFound(f"no evaluation set {set_id}", code="eval_set_not_found")
    return found


class EvalSetSerializer(serializers.ModelSerializer):
    tenant = StrictCharField(source="tenant.slug")

    class Meta:
        model = EvalSet
        fields = ["set_id", "tenant", "name", "description", "created_by", "created_at"]


class OverridesField(serializers.JSONField):
    """Checked by the service (overrides_parse), which names the fault with its own code."""


class RunReplayApi(APIView):
    session_roles = (ENGINEER,)

    class InputSerializer(ClosedSerializer):
        at_seq = StrictIntegerField(
            min_value=1, required=False, help_text="where the replay forks (default 1)"
        )
        overrides = OverridesField(required=False, default=dict, help_text=OVERRIDES_HELP)
        label = StrictCharField(max_length=200, required=False, allow_blank=True, default="")  # type: ignore[assignment]

    @extend_schema(
        summary="Replay a run with overrides (a round of one replay); side effects answered from the record",
        request=InputSerializer,
        responses={201: ROUND, **error_responses(409, 422)},
        examples=[
            OpenApiExample(
                "another model",
                value={"at_seq": 1, "overrides": {"backends": {"support_model": "rules-no-refunds"}}},
                request_only=True,
            )
        ],
    )
    def post(self, request: Request, run_id: UUID) -> Response:
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        run = run_for_request(request, run_id)
        eval_round = eval_round_start(
            actor=request_actor(request),
            overrides=data.validated_data["overrides"],
            run_id=run.run_id,
            at_seq=data.validated_data.get("at_seq"),
            label=data.validated_data["label"],
        )
        with tenant_bind(run.tenant_id):
            return Response(round_table(eval_round=eval_round).as_dict(), status=201)


class RunReplayComparisonApi(APIView):
    @extend_schema(
        summary="A replay beside its original: moves, final state's differences, tokens and cost, first divergence",
        responses={200: COMPARISON, **error_responses()},
    )
    def get(self, request: Request, run_id: UUID) -> Response:
        run = run_for_request(request, run_id)
        replay = replay_of(tenant_ids=[run.tenant_id], run_id=run.run_id)
        compared = replay_compare(replay=replay) if replay is not None else None
        if compared is None:
            raise NotFound(f"run {run_id} is not a replay (or its original is gone)", code="not_a_replay")
        return Response({"comparison": compared.as_dict()})


class EvalSetListApi(APIView):
    session_roles = (ENGINEER,)

    class InputSerializer(ClosedSerializer):
        tenant = StrictCharField(
            required=False, help_text="optional for an API key (its own tenant); staff name one"
        )
        name = StrictCharField(max_length=200)
        description = StrictCharField(max_length=2000, required=False, allow_blank=True, default="")

    @extend_schema(
        summary="The evaluation sets", responses={200: EvalSetSerializer(many=True), **error_responses()}
    )
    def get(self, request: Request) -> Response:
        QuerySerializer(data=request.query_params).is_valid(raise_exception=True)
        given = request.query_params.get("tenant")
        # A tenant named is the one listed (another tenant's, for a key, is 404 as on every list).
        tenant_ids = [request_tenant(request, given).tenant_id] if given else _tenant_ids(request)
        return Response(EvalSetSerializer(eval_sets_list(tenant_ids=tenant_ids), many=True).data)

    @extend_schema(
        summary="Create an evaluation set",
        request=InputSerializer,
        responses={201: EvalSetSerializer, **error_responses(409)},
        examples=[OpenApiExample("set", value={"name": "support conversations"}, request_only=True)],
    )
    def post(self, request: Request) -> Response:
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        tenant = request_tenant(request, data.validated_data.get("tenant"))
        created = eval_set_create(
            tenant=tenant,
            name=data.validated_data["name"],
            description=data.validated_data["description"],
            actor=request_actor(request),
        )
        return Response(EvalSetSerializer(created).data, status=201)


class EvalSetDetailApi(APIView):
    @extend_schema(
        summary="An evaluation set: its runs and its newest rounds",
        responses={
            200: inline_serializer(
                "EvaluationSetDetail",
                {
                    "set": EvalSetSerializer(),
                    "runs": serializers.JSONField(),
                    "rounds": serializers.JSONField(),
                },
            ),
            **error_responses(),
        },
    )
    def get(self, request: Request, set_id: UUID) -> Response:
        eval_set = _set_for_request(request, set_id)
        with tenant_bind(eval_set.tenant_id):
            members = [
                {"run_id": str(m.run_id), "at_seq": m.at_seq, "added_by": m.added_by}
                for m in eval_set_members(eval_set=eval_set)
            ]
            rounds = [
                {
                    "round_id": str(r.round_id),
                    "label": r.label,
                    "overrides": r.overrides,
                    "created_at": r.created_at,
                }
                for r in rounds_recent(tenant_ids=[eval_set.tenant_id], eval_set=eval_set)
            ]
        return Response({"set": EvalSetSerializer(eval_set).data, "runs": members, "rounds": rounds})


class EvalSetRunApi(APIView):
    session_roles = (ENGINEER,)

    class InputSerializer(ClosedSerializer):
        run_id = serializers.UUIDField()
        at_seq = StrictIntegerField(min_value=1, required=False)

    @extend_schema(
        summary="Keep a run in an evaluation set (where its replays fork: at_seq, default 1)",
        request=InputSerializer,
        examples=[
            OpenApiExample(
                "after the lookup",
                value={"run_id": "7d0f5e0c-2f7e-4f7e-9a51-0a3a4c1f2b6d", "at_seq": 2},
                request_only=True,
            )
        ],
        responses={
            201: inline_serializer(
                "EvaluationSetRun", {"run_id": serializers.UUIDField(), "at_seq": serializers.IntegerField()}
            ),
            **error_responses(422),
        },
    )
    def post(self, request: Request, set_id: UUID) -> Response:
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        eval_set = _set_for_request(request, set_id)
        run = run_for_request(request, data.validated_data["run_id"])
        member = eval_set_run_add(
            eval_set=eval_set,
            run_id=run.run_id,
            at_seq=data.validated_data.get("at_seq"),
            actor=request_actor(request),
        )
        return Response({"run_id": str(member.run_id), "at_seq": member.at_seq}, status=201)


class EvalSetRoundApi(APIView):
    session_roles = (ENGINEER,)

    class InputSerializer(ClosedSerializer):
        overrides = OverridesField(required=False, default=dict, help_text=OVERRIDES_HELP)
        label = StrictCharField(max_length=200, required=False, allow_blank=True, default="")  # type: ignore[assignment]

    @extend_schema(
        summary="Run an evaluation set again with overrides: a replay of each of its runs",
        request=InputSerializer,
        examples=[
            OpenApiExample(
                "the second configuration",
                value={
                    "overrides": {"backends": {"support_model": "rules-no-refunds"}},
                    "label": "no refunds",
                },
                request_only=True,
            )
        ],
        responses={201: ROUND, **error_responses(422)},
    )
    def post(self, request: Request, set_id: UUID) -> Response:
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        eval_set = _set_for_request(request, set_id)
        eval_round = eval_round_start(
            actor=request_actor(request),
            overrides=data.validated_data["overrides"],
            eval_set=eval_set,
            label=data.validated_data["label"],
        )
        with tenant_bind(eval_set.tenant_id):
            return Response(round_table(eval_round=eval_round).as_dict(), status=201)


class EvalRoundApi(APIView):
    @extend_schema(
        summary="A round's table of outcomes, replay beside original",
        responses={200: ROUND, **error_responses()},
    )
    def get(self, request: Request, round_id: UUID) -> Response:
        found = round_get(tenant_ids=_tenant_ids(request), round_id=round_id)
        if found is None or not request_may_see(request, found.tenant_id):
            raise NotFound(f"no evaluation round {round_id}", code="eval_round_not_found")
        with tenant_bind(found.tenant_id):
            body: dict[str, Any] = round_table(eval_round=found).as_dict()
        return Response(body)
