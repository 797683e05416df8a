"""REST API for external workflows: a tenant registers the workflows its outside workers run."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiExample, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api import (
    ClosedSerializer,
    StrictCharField,
    error_responses,
)
from core.api_auth import (
    request_actor,
    request_tenant,
)
from core.errors import ApplicationError
from core.roles import ENGINEER
from runs.api_workers import key_tenant
from runs.external.models import ExternalWorkflow
from runs.external.schema_index import MAX_SCHEMA_BYTES
from runs.external.workflows import external_workflow_register

# Room for an input_schema at its limit sent escaped (\uXXXX) or indented, and the rest of the body.
MAX_REGISTRATION_BYTES = 4 * MAX_SCHEMA_BYTES


class RegistrationTooLarge(ApplicationError):
    code = "request_too_large"
    http_status = 413


class ExternalWorkflowSerializer(serializers.ModelSerializer):
    class Meta:
        model = ExternalWorkflow
        fields = [
            "name",
            "version",
            "steps",
            "tools",
            "input_schema",
            "approval_guarded_steps",
            "signals",
            "description",
            "created_by",
            "created_at",
        ]


class ExternalWorkflowApi(APIView):
    session_roles = (ENGINEER,)  # a staff session's change needs the console's role for it

    class InputSerializer(ClosedSerializer):
        name = StrictCharField(max_length=200)
        version = StrictCharField(max_length=50)
        steps = serializers.ListField(child=StrictCharField(max_length=100), min_length=1, max_length=100)
        tools = serializers.ListField(child=serializers.DictField(child=StrictCharField()), required=False)
        input_schema = serializers.JSONField(required=False, allow_null=True)
        approval_guarded_steps = serializers.ListField(child=StrictCharField(max_length=100), required=False)
        signals = serializers.ListField(
            child=StrictCharField(max_length=100),
            required=False,
            help_text="names of the signals its runs accept (POST /api/v1/runs/{id}/signals/{name})",
        )
        description = StrictCharField(max_length=2000, required=False, allow_blank=True, default="")

    @extend_schema(
        summary="Register an external workflow (its steps run in your own workers; idempotent per version)",
        request=InputSerializer,
        responses={
            201: ExternalWorkflowSerializer,
            200: ExternalWorkflowSerializer,
            **error_responses(409, 413, 422),
        },
        examples=[
            OpenApiExample(
                "refund",
                value={
                    "name": "ext.refund",
                    "version": "1",
                    "steps": ["lookup", "refund", "done"],
                    "tools": [{"name": "payments.refund", "version": "payments.v1"}],
                    "input_schema": {"type": "object", "required": ["order_id"]},
                },
                request_only=True,
            )
        ],
    )
    def post(self, request: Request) -> Response:
        # Refused before it is parsed: parsing and walking a body of megabytes (the server takes up to
        # DATA_UPLOAD_MAX_MEMORY_SIZE) held a web thread for a schema the limits refuse anyway.
        if len(request._request.body) > MAX_REGISTRATION_BYTES:
            raise RegistrationTooLarge(
                f"a registration's body is at most {MAX_REGISTRATION_BYTES:,} bytes (its input_schema at "
                f"most {MAX_SCHEMA_BYTES:,} bytes of compact JSON)",
                details={"limit": "bytes of the body", "maximum": MAX_REGISTRATION_BYTES},
            )
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        key_tenant(request)
        registered = external_workflow_register(
            tenant=request_tenant(request), actor=request_actor(request), **data.validated_data
        )
        body = ExternalWorkflowSerializer(registered.workflow).data
        return Response(body, status=201 if registered.created else 200)

    @extend_schema(
        summary="List this tenant's external workflows",
        responses={200: ExternalWorkflowSerializer(many=True), **error_responses()},
    )
    def get(self, request: Request) -> Response:
        key_tenant(request)
        rows = ExternalWorkflow.objects.order_by("name", "id")
        return Response(ExternalWorkflowSerializer(rows, many=True).data)


# --- claim ----------------------------------------------------------------------------------------
