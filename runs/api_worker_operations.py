"""REST API for an outside worker's side effects and approvals: prepare, started and outcome of an
operation, and the approval a step asks for, each under the run's lease."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from drf_spectacular.utils import OpenApiExample, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from core.api import (
    StrictCharField,
    StrictFloatField,
    StrictRegexField,
    error_responses,
)
from runs.api_workers import OPERATION, LeaseInputSerializer, WorkerRunApiView, lease_of_request
from runs.external import operations
from runs.kernel.records import OperationRow


def _operation(op: OperationRow) -> dict[str, Any]:
    return {
        "operation_id": op.operation_id,
        "idempotency_key": op.operation_id,
        "status": op.status,
        "external_ref": op.external_ref,
        "result": op.result,
        "attempts": op.attempts,
    }


class WorkerOperationPrepareApi(WorkerRunApiView):
    class InputSerializer(LeaseInputSerializer):
        # Not dots alone: "." and ".." are path segments every HTTP client resolves away, so the
        # operation's started/outcome URLs could not be reached.
        operation_id = StrictRegexField(
            r"^(?!\.+$)[A-Za-z0-9_.:-]{1,200}$",
            rule="1 to 200 letters, digits, '_', '.', ':' or '-', not dots alone",
        )
        tool_name = StrictCharField(max_length=200)
        tool_contract_version = StrictCharField(max_length=50)
        request = serializers.DictField()

    @extend_schema(
        summary="Prepare a side effect once per operation id; send the returned idempotency_key outside",
        description="Idempotent: the same id returns the operation as it is now (a `succeeded` one must not be "
        "sent again). The same id with another request is a 409.",
        request=InputSerializer,
        responses={200: OPERATION, **error_responses(409, 422)},
        examples=[
            OpenApiExample(
                "example",
                value={
                    "lease_token": "lt1.eyJ...signed",
                    "operation_id": "refund:o-1",
                    "tool_name": "payments.refund",
                    "tool_contract_version": "payments.v1",
                    "request": {"order_id": "o-1", "amount_minor": 2500},
                },
                request_only=True,
            )
        ],
    )
    def post(self, request: Request, run_id: UUID) -> Response:
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        v = dict(data.validated_data)
        lease = lease_of_request(request, run_id, v.pop("lease_token"))
        return Response(_operation(operations.external_operation_prepare(lease=lease, **v)))


class WorkerOperationStartedApi(WorkerRunApiView):
    class InputSerializer(LeaseInputSerializer):
        call_timeout_s = StrictFloatField(
            min_value=0,
            max_value=86400,
            required=False,
            help_text="the longest your call may take (default KEEPER_OPERATION_CALL_TIMEOUT): until that "
            "long after this start, a lookup's not_applied is refused (409 operation_in_flight)",
        )

    @extend_schema(
        summary="Mark a prepared operation started, just before sending it (only the lease holder)",
        request=InputSerializer,
        responses={200: OPERATION, **error_responses(409)},
        examples=[OpenApiExample("example", value={"lease_token": "lt1.eyJ...signed"}, request_only=True)],
    )
    def post(self, request: Request, run_id: UUID, operation_id: str) -> Response:
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        lease = lease_of_request(request, run_id, data.validated_data["lease_token"])
        started = operations.external_operation_started(
            lease=lease, operation_id=operation_id, call_timeout_s=data.validated_data.get("call_timeout_s")
        )
        return Response(_operation(started))


class WorkerOperationOutcomeApi(WorkerRunApiView):
    class InputSerializer(LeaseInputSerializer):
        outcome = serializers.ChoiceField(choices=operations.OUTCOMES)
        external_ref = StrictCharField(max_length=200, required=False, allow_blank=True)
        result = serializers.JSONField(required=False, allow_null=True)
        note = StrictCharField(max_length=2000, required=False, allow_blank=True, default="")

    @extend_schema(
        summary="Report what the outside system answered: succeeded (+external_ref), failed, unknown, not_applied",
        description="A timeout or dropped connection is `unknown`, never `failed`. `not_applied` only after an "
        "authoritative lookup by the idempotency key (it permits sending once more).",
        request=InputSerializer,
        responses={200: OPERATION, **error_responses(409, 422)},
        examples=[
            OpenApiExample(
                "example",
                value={"lease_token": "lt1.eyJ...signed", "outcome": "succeeded", "external_ref": "rf_123"},
                request_only=True,
            )
        ],
    )
    def post(self, request: Request, run_id: UUID, operation_id: str) -> Response:
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data
        lease = lease_of_request(request, run_id, v["lease_token"])
        op = operations.external_operation_outcome(
            lease=lease,
            operation_id=operation_id,
            outcome=v["outcome"],
            external_ref=v.get("external_ref") or None,
            result=v.get("result"),
            note=v["note"],
        )
        return Response(_operation(op))


class WorkerApprovalApi(WorkerRunApiView):
    class InputSerializer(LeaseInputSerializer):
        request = serializers.DictField()
        reasons = serializers.ListField(child=StrictCharField(max_length=200), required=False, default=list)

    @extend_schema(
        summary="Ask a person to approve this exact request (bound by its digest), or learn their decision",
        description="`use`: approved, unexpired, same digest. `wait`: commit a suspend with the given reason, "
        "keeping `approval` {approval_id} and `request_digest` in the state; the approval resumes the run. "
        "`rejected`: stop.",
        request=InputSerializer,
        responses={
            200: inline_serializer(
                "WorkerApproval",
                {
                    "verdict": serializers.ChoiceField(choices=["use", "wait", "rejected"]),
                    "approval_id": serializers.UUIDField(),
                    "status": StrictCharField(),
                    "request_digest": StrictCharField(),
                    "expires_at": serializers.DateTimeField(),
                    "reason": StrictCharField(),
                    "detail": StrictCharField(),
                },
            ),
            **error_responses(409),
        },
        examples=[
            OpenApiExample(
                "approval",
                value={
                    "lease_token": "lt1.eyJ...signed",
                    "request": {"order_id": "o-1", "amount_minor": 2500},
                },
                request_only=True,
            )
        ],
    )
    def post(self, request: Request, run_id: UUID) -> Response:
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data
        lease = lease_of_request(request, run_id, v["lease_token"])
        verdict, approval, reason, detail = operations.external_approval_check(
            lease=lease, request=v["request"], reasons=v["reasons"]
        )
        return Response(
            {
                "verdict": verdict,
                "approval_id": approval.approval_id,
                "status": approval.status,
                "request_digest": approval.request_digest,
                "expires_at": approval.expires_at,
                "reason": reason,
                "detail": detail,
            }
        )
