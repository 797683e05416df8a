"""REST API for procedural memory: list and read procedures; a person confirms, rejects or edits one.

Reading takes an API key or a staff session; a decision takes a person (a staff session with the
support or engineer role): a key is a program, and what a program learned is not offered to a
model until someone read it.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from drf_spectacular.utils import OpenApiExample, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api import (
    ClosedSerializer,
    QuerySerializer,
    StrictCharField,
    StrictIntegerField,
    error_responses,
)
from core.api_auth import request_actor, request_key, request_tenant
from core.errors import ApplicationError, NotFound
from core.roles import ENGINEER, SUPPORT
from memory.procedures.models import Procedure, ProcedureSource, ProcedureStatus
from memory.procedures.selectors import procedure_get, procedure_list, procedure_sources
from memory.procedures.services import procedure_confirm, procedure_edit, procedure_reject


class PersonRequired(ApplicationError):
    code = "procedure_decision_needs_a_person"
    http_status = 403


class ProcedureSourceOutputSerializer(serializers.ModelSerializer):
    class Meta:
        model = ProcedureSource
        fields = ["run_id", "request_seq", "reply_seq", "invalidated_at", "invalidation_reason", "created_at"]


class ProcedureOutputSerializer(serializers.ModelSerializer):
    sources = serializers.SerializerMethodField()

    class Meta:
        model = Procedure
        fields = [
            "procedure_id",
            "workflow_name",
            "name",
            "trigger",
            "steps",
            "status",
            "version",
            "decided_by",
            "decided_at",
            "decision_note",
            "invalidated_at",
            "invalidation_reason",
            "created_at",
            "updated_at",
            "sources",
        ]

    def get_sources(self, procedure: Procedure) -> list[dict[str, Any]]:
        found = self.context.get("sources", {}).get(procedure.procedure_id, [])
        return list(ProcedureSourceOutputSerializer(found, many=True).data)


PROCEDURE_LIST = inline_serializer("ProcedureList", {"results": ProcedureOutputSerializer(many=True)})


def _out(tenant: Any, procedures: list[Procedure]) -> dict[str, Any]:
    by: dict[UUID, list[ProcedureSource]] = {}
    for source in procedure_sources(tenant=tenant, procedure_ids=[p.procedure_id for p in procedures]):
        by.setdefault(source.procedure_id, []).append(source)
    return {"sources": by}


class ProceduresApi(APIView):
    class FilterSerializer(QuerySerializer):
        tenant = StrictCharField(
            max_length=64, required=False, allow_blank=True
        )  # with an API key: the key's
        status = serializers.ChoiceField(choices=ProcedureStatus.values, required=False)
        limit = StrictIntegerField(min_value=1, max_value=500, required=False, default=100)

    @extend_schema(
        summary="Procedures learned from runs (proposed, confirmed or rejected), newest first",
        parameters=[FilterSerializer],
        responses={200: PROCEDURE_LIST, **error_responses()},
    )
    def get(self, request: Request) -> Response:
        filters = self.FilterSerializer(data=request.query_params.dict())
        filters.is_valid(raise_exception=True)
        tenant = request_tenant(request, filters.validated_data.get("tenant"))
        found = procedure_list(
            tenant=tenant, status=filters.validated_data.get("status"), limit=filters.validated_data["limit"]
        )
        data = ProcedureOutputSerializer(found, many=True, context=_out(tenant, found)).data
        return Response({"results": data})


def _one(request: Request, tenant_given: str | None, procedure_id: UUID) -> tuple[Any, Procedure]:
    tenant = request_tenant(request, tenant_given)
    found = procedure_get(tenant=tenant, procedure_id=procedure_id)
    if found is None:
        raise NotFound(f"no procedure {procedure_id}", code="procedure_not_found")
    return tenant, found


class TenantQuery(QuerySerializer):
    tenant = StrictCharField(max_length=64, required=False, allow_blank=True)  # with an API key: the key's


class ProcedureApi(APIView):
    session_roles = (SUPPORT, ENGINEER)

    class EditSerializer(ClosedSerializer):
        tenant = StrictCharField(max_length=64, required=False, allow_blank=True)
        name = StrictCharField(max_length=200, required=False)
        trigger = serializers.JSONField(required=False)  # words: a list, or one text
        note = StrictCharField(max_length=2000, required=False, allow_blank=True, default="")

    @extend_schema(
        summary="One procedure, with the runs it was learned from",
        parameters=[TenantQuery],
        responses={200: ProcedureOutputSerializer, **error_responses(404)},
    )
    def get(self, request: Request, procedure_id: UUID) -> Response:
        filters = TenantQuery(data=request.query_params.dict())
        filters.is_valid(raise_exception=True)
        tenant, found = _one(request, filters.validated_data.get("tenant"), procedure_id)
        return Response(ProcedureOutputSerializer(found, context=_out(tenant, [found])).data)

    @extend_schema(
        summary="A person renames a procedure or says which requests it is for (a new version)",
        request=EditSerializer,
        examples=[
            OpenApiExample(
                "trigger",
                value={"tenant": "acme", "trigger": ["refund", "order"], "note": "refunds"},
                request_only=True,
            )
        ],
        responses={200: ProcedureOutputSerializer, **error_responses(403, 404, 422)},
    )
    def patch(self, request: Request, procedure_id: UUID) -> Response:
        data = self.EditSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        fields = dict(data.validated_data)
        tenant, _ = _one(request, fields.pop("tenant", None), procedure_id)
        if request_key(request) is not None:
            raise PersonRequired("a person edits a procedure, signed in to the console or a staff session")
        done = procedure_edit(
            tenant=tenant, procedure_id=procedure_id, actor=request_actor(request), **fields
        )
        return Response(ProcedureOutputSerializer(done, context=_out(tenant, [done])).data)


class ProcedureDecisionApi(APIView):
    session_roles = (SUPPORT, ENGINEER)
    decision = ""

    class InputSerializer(ClosedSerializer):
        tenant = StrictCharField(max_length=64, required=False, allow_blank=True)
        note = StrictCharField(max_length=2000, required=False, allow_blank=True, default="")

    def post(self, request: Request, procedure_id: UUID) -> Response:
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        tenant, _ = _one(request, data.validated_data.get("tenant"), procedure_id)
        if request_key(request) is not None:  # after the lookup: another tenant's is 404 for a key
            raise PersonRequired(
                f"a person {self.decision}s a procedure, signed in to the console or a staff session"
            )
        decide = procedure_confirm if self.decision == "confirm" else procedure_reject
        done = decide(
            tenant=tenant,
            procedure_id=procedure_id,
            actor=request_actor(request),
            note=data.validated_data["note"],
        )
        return Response(ProcedureOutputSerializer(done, context=_out(tenant, [done])).data)


class ProcedureConfirmApi(ProcedureDecisionApi):
    decision = "confirm"

    @extend_schema(
        summary="A person confirms a procedure: contexts of matching requests are offered it",
        request=ProcedureDecisionApi.InputSerializer,
        examples=[
            OpenApiExample("confirm", value={"tenant": "acme", "note": "read the steps"}, request_only=True)
        ],
        responses={200: ProcedureOutputSerializer, **error_responses(403, 404, 409, 422)},
    )
    def post(self, request: Request, procedure_id: UUID) -> Response:
        return super().post(request, procedure_id)


class ProcedureRejectApi(ProcedureDecisionApi):
    decision = "reject"

    @extend_schema(
        summary="A person rejects a procedure: it is never offered, and runs of its shape do not propose it again",
        request=ProcedureDecisionApi.InputSerializer,
        examples=[
            OpenApiExample("reject", value={"tenant": "acme", "note": "read the steps"}, request_only=True)
        ],
        responses={200: ProcedureOutputSerializer, **error_responses(403, 404, 422)},
    )
    def post(self, request: Request, procedure_id: UUID) -> Response:
        return super().post(request, procedure_id)
