"""REST API for what a person decides: approvals (approve, reject), reconciling operations, and
correcting a wrong reconciliation."""

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
    StrictBooleanField,
    StrictCharField,
    StrictIntegerField,
    error_responses,
)
from core.api_auth import request_actor, request_key, request_may_see, request_tenant
from core.errors import NotFound
from core.roles import SUPPORT
from runs.api import run_for_request
from runs.engine.approvals import approval_approve, approval_reject
from runs.engine.operations import RECONCILE_OUTCOMES, operation_reconcile
from runs.engine.reconciliation import operation_reconciliation_correct
from runs.engine.selectors import approval_list, approval_page, operation_get, run_operations
from runs.kernel.models import Approval, ApprovalStatus, ToolOperation


def _approval_check(request: Request, approval_id: UUID) -> None:
    """An approval of another tenant does not exist for this key or this session (its user's
    tenants); for a session, its tenant is the audit entry's: audited with no tenant, decisions made
    through the API would be out of the tenant's staff's sight."""
    tenant_id = Approval.objects.filter(approval_id=approval_id).values_list("tenant_id", flat=True).first()
    if tenant_id is None or not request_may_see(request, tenant_id):
        raise NotFound(f"no approval {approval_id}", code="approval_not_found")


class ApprovalOutputSerializer(serializers.ModelSerializer):
    tenant = StrictCharField(source="tenant.slug")

    class Meta:
        model = Approval
        fields = [
            "approval_id",
            "tenant",
            "run_id",
            "step_id",
            "request",
            "request_digest",
            "reasons",
            "status",
            "expires_at",
            "decided_by",
            "decided_at",
            "note",
            "created_at",
        ]


class OperationOutputSerializer(serializers.ModelSerializer):
    class Meta:
        model = ToolOperation
        fields = [
            "id",
            "operation_id",
            "run_id",
            "step_id",
            "tool_name",
            "tool_contract_version",
            "request_digest",
            "status",
            "external_ref",
            "result",
            "attempts",
            "history",
            "created_at",
            "updated_at",
        ]


class ApprovalListApi(APIView):
    class FilterSerializer(QuerySerializer):
        status = serializers.ChoiceField(choices=ApprovalStatus.choices, required=False)
        run_id = serializers.UUIDField(required=False)
        tenant = StrictCharField(max_length=64, required=False, allow_blank=True)
        before_created_at = serializers.DateTimeField(required=False)
        before_approval_id = serializers.UUIDField(required=False)
        limit = serializers.IntegerField(min_value=1, max_value=200, default=200)

        def validate(self, data: dict[str, Any]) -> dict[str, Any]:
            if ("before_created_at" in data) != ("before_approval_id" in data):
                raise serializers.ValidationError(
                    "before_created_at and before_approval_id come together (the cursor)"
                )
            return data

    @extend_schema(
        summary="List approvals, newest first (keyset pages: pass `next` back as the cursor)",
        parameters=[FilterSerializer],
        responses={
            200: inline_serializer(
                "ApprovalList",
                {
                    "results": ApprovalOutputSerializer(many=True),
                    "next": inline_serializer(
                        "ApprovalsCursor",
                        {
                            "before_created_at": serializers.DateTimeField(),
                            "before_approval_id": serializers.UUIDField(),
                        },
                        allow_null=True,
                    ),
                },
            ),
            **error_responses(400),
        },
    )
    def get(self, request: Request) -> Response:
        filters = self.FilterSerializer(data=request.query_params)
        filters.is_valid(raise_exception=True)
        data = filters.validated_data
        approvals = approval_list(status=data.get("status"), run_id=data.get("run_id"))
        if request_key(request) is not None or data.get("tenant"):
            approvals = approvals.filter(tenant=request_tenant(request, data.get("tenant")))
        given = data.get("before_created_at")
        cursor = (given, data["before_approval_id"]) if given is not None else None
        page = approval_page(approvals=approvals, cursor=cursor, limit=data["limit"])
        after = page.next_cursor
        return Response(
            {
                "results": ApprovalOutputSerializer(page.rows, many=True).data,
                "next": {"before_created_at": after[0], "before_approval_id": after[1]} if after else None,
            }
        )


class ApprovalDecisionInputSerializer(ClosedSerializer):
    note = StrictCharField(max_length=2000, required=False, allow_blank=True, default="")


class ApprovalApproveApi(APIView):
    session_roles = (SUPPORT,)  # a staff session's change needs the console's role for it

    @extend_schema(
        summary="Approve a pending request",
        request=ApprovalDecisionInputSerializer,
        responses={200: ApprovalOutputSerializer, **error_responses(409, 422)},
        examples=[OpenApiExample("approve", value={"note": "checked the order"}, request_only=True)],
    )
    def post(self, request: Request, approval_id: UUID) -> Response:
        data = ApprovalDecisionInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        _approval_check(request, approval_id)
        approval = approval_approve(
            approval_id=approval_id, actor=request_actor(request), note=data.validated_data["note"]
        )
        return Response(ApprovalOutputSerializer(approval).data)


class ApprovalRejectApi(APIView):
    session_roles = (SUPPORT,)  # a staff session's change needs the console's role for it

    @extend_schema(
        summary="Reject a pending request (a note is required)",
        request=ApprovalDecisionInputSerializer,
        responses={200: ApprovalOutputSerializer, **error_responses(409, 422)},
        examples=[OpenApiExample("reject", value={"note": "not delivered"}, request_only=True)],
    )
    def post(self, request: Request, approval_id: UUID) -> Response:
        data = ApprovalDecisionInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        _approval_check(request, approval_id)
        approval = approval_reject(
            approval_id=approval_id, actor=request_actor(request), note=data.validated_data["note"]
        )
        return Response(ApprovalOutputSerializer(approval).data)


class RunOperationsApi(APIView):
    @extend_schema(
        summary="A run's tool operations with their protocol history",
        responses={
            200: inline_serializer("OperationList", {"results": OperationOutputSerializer(many=True)}),
            **error_responses(),
        },
    )
    def get(self, request: Request, run_id: UUID) -> Response:
        run_for_request(request, run_id)
        return Response({"results": OperationOutputSerializer(run_operations(run_id=run_id), many=True).data})


class OperationReconcileApi(APIView):
    session_roles = (SUPPORT,)  # a staff session's change needs the console's role for it

    class InputSerializer(ClosedSerializer):
        outcome = serializers.ChoiceField(choices=RECONCILE_OUTCOMES)
        note = StrictCharField(max_length=2000)
        external_ref = StrictCharField(max_length=200, required=False, allow_blank=True, default="")
        resume = StrictBooleanField(required=False, default=True)

    @extend_schema(
        summary="Settle an operation whose outcome is unknown",
        request=InputSerializer,
        responses={200: OperationOutputSerializer, **error_responses(409, 422)},
        examples=[
            OpenApiExample(
                "applied",
                value={"outcome": "applied", "note": "seen in the ledger", "external_ref": "re_123"},
                request_only=True,
            )
        ],
    )
    def post(self, request: Request, pk: int) -> Response:
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        op = operation_get(pk=pk)
        if not request_may_see(request, op.tenant_id):
            raise NotFound(f"no operation {pk}", code="operation_not_found")
        reconciled = operation_reconcile(
            tenant_id=op.tenant_id,
            operation_id=op.operation_id,
            actor=request_actor(request),
            **data.validated_data,
        )
        return Response(OperationOutputSerializer(reconciled).data)


class OperationCorrectApi(APIView):
    session_roles = (SUPPORT,)  # a staff session's change needs the console's role for it

    class InputSerializer(ClosedSerializer):
        outcome = serializers.ChoiceField(choices=RECONCILE_OUTCOMES)
        note = StrictCharField(max_length=2000)
        external_ref = StrictCharField(max_length=200, required=False, allow_blank=True, default="")
        checked_by_hand = StrictBooleanField(required=False, default=False)
        expected_revision = StrictIntegerField(required=False, min_value=1)
        resume = StrictBooleanField(required=False, default=True)

    @extend_schema(
        summary="Correct a person's reconciliation of an operation (its run goes back to the step that made the call)",
        description="Only while the operation's outcome is a person's reconciliation and its run is "
        "suspended (typically `verification_failed` after a wrong reference). `applied` needs the right "
        "`external_ref`: one of the provider's records for the operation, or `checked_by_hand` (422 "
        "`unknown_reference` / `reference_unchecked` otherwise); `not_applied` lets the run send it once "
        "more. The earlier reconciliation is kept; a `reconciliation_corrected` event takes the run back "
        "to the step, which reads the corrected record. With `expected_revision` (the run's revision "
        "you read), a run that moved meanwhile is 409 `stale_revision`. 409 `operation_not_reconciled`, "
        "`run_not_suspended`, `resume_pending`, `correction_refused`; 422 `nothing_to_correct`.",
        request=InputSerializer,
        responses={
            200: inline_serializer(
                "ReconciliationCorrection",
                {
                    "operation": OperationOutputSerializer(),
                    "seq": serializers.IntegerField(),
                    "step": serializers.CharField(),
                    "reference_check": serializers.CharField(),
                    "corrects": serializers.DictField(),
                },
            ),
            **error_responses(409, 422),
        },
        examples=[
            OpenApiExample(
                "applied",
                value={
                    "outcome": "applied",
                    "external_ref": "rf_8812",
                    "note": "rf_0001 was another order's refund; the ledger shows rf_8812",
                    "expected_revision": 14,
                },
                request_only=True,
            )
        ],
    )
    def post(self, request: Request, pk: int) -> Response:
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        op = operation_get(pk=pk)
        if not request_may_see(request, op.tenant_id):
            raise NotFound(f"no operation {pk}", code="operation_not_found")
        corrected = operation_reconciliation_correct(
            tenant_id=op.tenant_id,
            operation_id=op.operation_id,
            actor=request_actor(request),
            **data.validated_data,
        )
        replaced = corrected.replaced
        return Response(
            {
                "operation": OperationOutputSerializer(corrected.op).data,
                "seq": corrected.seq,
                "step": corrected.step,
                "reference_check": corrected.reference_check,
                "corrects": {
                    "seq": replaced.seq,
                    "actor": replaced.actor,
                    "at": replaced.at.isoformat(),
                    "outcome": replaced.outcome,
                    "external_ref": replaced.external_ref,
                },
            }
        )
