"""The erasure API: ask for a subject's erasure, read its progress and receipt, retry it."""

from __future__ import annotations

from uuid import UUID

from drf_spectacular.utils import OpenApiExample, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api import ClosedSerializer, StrictCharField, TenantParameterSerializer, error_responses
from core.api_auth import request_actor, request_tenant
from core.errors import NotFound
from core.roles import COMPLIANCE
from core.tenancy import tenant_scope
from erasure.models import ErasureRequest, ErasureStatus
from erasure.services import erasure_request_create, erasure_request_retry


class ErasureOutputSerializer(serializers.ModelSerializer[ErasureRequest]):
    class Meta:
        model = ErasureRequest
        fields = [
            "request_id",
            "subject_digest",
            "requested_by",
            "status",
            "progress",
            "receipt",
            "error",
            "created_at",
            "completed_at",
        ]


class ErasureRequestsApi(APIView):
    session_roles = (COMPLIANCE,)  # a staff session's change needs the console's role for it

    class InputSerializer(ClosedSerializer):
        tenant = StrictCharField(
            max_length=64, required=False, allow_blank=True
        )  # with an API key: the key's
        subject_id = StrictCharField(max_length=200, trim_whitespace=False)

    @extend_schema(
        summary="Erase everything about a subject (asynchronous)",
        request=InputSerializer,
        responses={202: ErasureOutputSerializer, **error_responses(409, 422)},
        examples=[
            OpenApiExample("erase", value={"tenant": "acme", "subject_id": "customer-7"}, request_only=True)
        ],
    )
    def post(self, request: Request) -> Response:
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        created = erasure_request_create(
            tenant=request_tenant(request, data.validated_data.get("tenant")),
            subject_id=data.validated_data["subject_id"],
            requested_by=request_actor(request),
        )
        return Response(ErasureOutputSerializer(created).data, status=202)


class ErasureRequestDetailApi(APIView):
    @extend_schema(
        summary="An erasure request's status and receipt",
        parameters=[TenantParameterSerializer],
        responses={200: ErasureOutputSerializer, **error_responses()},
    )
    def get(self, request: Request, request_id: UUID) -> Response:
        tenant = request_tenant(request, request.query_params.get("tenant", ""))
        with tenant_scope(tenant.tenant_id):
            found = ErasureRequest.objects.filter(request_id=request_id).first()
        if found is None:
            raise NotFound(
                f"no erasure request {request_id} for tenant {tenant.slug}", code="erasure_request_not_found"
            )
        return Response(ErasureOutputSerializer(found).data)


class ErasureRequestRetryApi(APIView):
    session_roles = (COMPLIANCE,)  # a staff session's change needs the console's role for it

    @extend_schema(
        summary="Retry an erasure request that did not finish",
        description="A failed request is handed to a worker again and picks up where it stopped; a "
        "pending or running one is sent again; a completed one is returned as it is (200).",
        request=None,
        parameters=[TenantParameterSerializer],
        responses={200: ErasureOutputSerializer, 202: ErasureOutputSerializer, **error_responses(409)},
    )
    def post(self, request: Request, request_id: UUID) -> Response:
        tenant = request_tenant(request, request.query_params.get("tenant", ""))
        retried = erasure_request_retry(tenant=tenant, request_id=request_id)
        done = retried.status == ErasureStatus.COMPLETED
        return Response(ErasureOutputSerializer(retried).data, status=200 if done else 202)
