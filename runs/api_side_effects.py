"""REST API for what a person decides: approvals (approve, reject) and reconciling operations."""

from __future__ import annotations

from uuid import UUID

from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from runs.models import Approval, ApprovalStatus, ToolOperation
from runs.selectors import approval_list, operation_get, run_get, run_operations
from runs.services.approvals import approval_approve, approval_reject
from runs.services.operations import RECONCILE_OUTCOMES, operation_reconcile


def _actor(request: Request) -> str:
    return f"user:{request.user.get_username()}"


class ApprovalOutputSerializer(serializers.ModelSerializer):
    tenant = serializers.CharField(source="tenant.slug")

    class Meta:
        model = Approval
        fields = ["approval_id", "tenant", "run_id", "step_id", "request", "request_digest", "reasons", "status",
                  "expires_at", "decided_by", "decided_at", "note", "created_at"]  # fmt: skip


class OperationOutputSerializer(serializers.ModelSerializer):
    class Meta:
        model = ToolOperation
        fields = ["id", "operation_id", "run_id", "step_id", "tool_name", "tool_contract_version", "request_digest",
                  "status", "external_ref", "result", "attempts", "history", "created_at", "updated_at"]  # fmt: skip


class ApprovalListApi(APIView):
    class FilterSerializer(serializers.Serializer):
        status = serializers.ChoiceField(choices=ApprovalStatus.choices, required=False)

    def get(self, request: Request) -> Response:
        filters = self.FilterSerializer(data=request.query_params)
        filters.is_valid(raise_exception=True)
        approvals = approval_list(status=filters.validated_data.get("status"))[:200]
        return Response({"results": ApprovalOutputSerializer(approvals, many=True).data})


class ApprovalDecisionInputSerializer(serializers.Serializer):
    note = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")


class ApprovalApproveApi(APIView):
    def post(self, request: Request, approval_id: UUID) -> Response:
        data = ApprovalDecisionInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        approval = approval_approve(
            approval_id=approval_id, actor=_actor(request), note=data.validated_data["note"]
        )
        return Response(ApprovalOutputSerializer(approval).data)


class ApprovalRejectApi(APIView):
    def post(self, request: Request, approval_id: UUID) -> Response:
        data = ApprovalDecisionInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        approval = approval_reject(
            approval_id=approval_id, actor=_actor(request), note=data.validated_data["note"]
        )
        return Response(ApprovalOutputSerializer(approval).data)


class RunOperationsApi(APIView):
    def get(self, request: Request, run_id: UUID) -> Response:
        run_get(run_id=run_id)
        return Response({"results": OperationOutputSerializer(run_operations(run_id=run_id), many=True).data})


class OperationReconcileApi(APIView):
    class InputSerializer(serializers.Serializer):
        outcome = serializers.ChoiceField(choices=RECONCILE_OUTCOMES)
        note = serializers.CharField(max_length=2000)
        external_ref = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")
        resume = serializers.BooleanField(required=False, default=True)

    def post(self, request: Request, pk: int) -> Response:
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        op = operation_get(pk=pk)
        reconciled = operation_reconcile(
            tenant_id=op.tenant_id, operation_id=op.operation_id, actor=_actor(request), **data.validated_data
        )
        return Response(OperationOutputSerializer(reconciled).data)
