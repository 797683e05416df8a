"""REST API for schedules (/api/v1/schedules/) and the workflows with their versions (/api/v1/workflows/)."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from drf_spectacular.utils import OpenApiExample, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api import (
    ClosedSerializer,
    StrictBooleanField,
    StrictCharField,
    StrictIntegerField,
    TenantParameterSerializer,
    error_responses,
)
from core.api_auth import request_actor, request_key, request_tenant
from core.models import Tenant
from core.roles import ENGINEER
from runs.engine.schedule_models import OverlapPolicy, WorkflowSchedule
from runs.engine.schedules import (
    schedule_create,
    schedule_delete,
    schedule_get,
    schedule_update,
    schedule_views,
)
from runs.engine.versions import VersionRow, WorkflowRow, workflow_versions


class ScheduleOutputSerializer(serializers.ModelSerializer):
    tenant = StrictCharField(source="tenant.slug")
    last_run_status = serializers.SerializerMethodField()

    class Meta:
        model = WorkflowSchedule
        fields = [
            "schedule_id",
            "tenant",
            "workflow_name",
            "cron",
            "interval_seconds",
            "input",
            "subject",
            "overlap",
            "enabled",
            "next_fire_at",
            "last_slot",
            "last_run_id",
            "last_run_status",
            "last_skipped_slot",
            "last_error",
            "fired_count",
            "skipped_count",
            "created_by",
            "created_at",
            "updated_at",
        ]

    def get_last_run_status(self, schedule: WorkflowSchedule) -> str | None:
        return self.context.get("statuses", {}).get(schedule.schedule_id)


def _tenant(request: Request) -> Tenant:
    """The key's tenant, or (staff) the one `?tenant=` or the body's `tenant` names."""
    given = request.query_params.get("tenant") or (
        request.data.get("tenant") if isinstance(request.data, dict) else None
    )
    return request_tenant(request, given)


def _one(request: Request, schedule: WorkflowSchedule) -> Response:
    views = [v for v in schedule_views(tenant=schedule.tenant) if v.schedule.pk == schedule.pk]
    statuses = {schedule.schedule_id: views[0].last_run_status} if views else {}
    return Response(ScheduleOutputSerializer(schedule, context={"statuses": statuses}).data)


class ScheduleListApi(APIView):
    session_roles = (ENGINEER,)  # a staff session's change needs the console's role for it

    class InputSerializer(ClosedSerializer):
        tenant = StrictCharField(max_length=64, required=False, allow_blank=True)  # with a key: the key's
        workflow = StrictCharField(max_length=200)
        cron = StrictCharField(max_length=200, required=False, allow_blank=True)
        interval_seconds = StrictIntegerField(required=False, allow_null=True)
        input = serializers.JSONField()
        subject = StrictCharField(max_length=200, trim_whitespace=False, required=False, default="")
        overlap = StrictCharField(max_length=20, required=False, default=OverlapPolicy.SKIP)
        enabled = StrictBooleanField(required=False, default=True)

    @extend_schema(
        summary="Schedule a workflow on a cron expression (5 fields, UTC) or an interval in seconds",
        request=InputSerializer,
        responses={201: ScheduleOutputSerializer, **error_responses(422)},
        examples=[
            OpenApiExample(
                "nightly",
                value={
                    "workflow": "demo.countdown",
                    "cron": "0 3 * * *",
                    "input": {"n": 3},
                    "overlap": "skip",
                },
                request_only=True,
            )
        ],
    )
    def post(self, request: Request) -> Response:
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data: dict[str, Any] = dict(serializer.validated_data)
        schedule = schedule_create(
            tenant=request_tenant(request, data.get("tenant")),
            workflow_name=data["workflow"],
            cron=data.get("cron") or None,
            interval_seconds=data.get("interval_seconds"),
            input=data["input"],
            subject=data["subject"],
            overlap=data["overlap"],
            enabled=data["enabled"],
            actor=request_actor(request),
        )
        response = _one(request, schedule)
        response.status_code = 201
        return response

    @extend_schema(
        summary="List the tenant's schedules (a staff session names the tenant)",
        parameters=[TenantParameterSerializer],
        responses={200: ScheduleOutputSerializer(many=True), **error_responses()},
    )
    def get(self, request: Request) -> Response:
        views = schedule_views(tenant=_tenant(request))
        statuses = {v.schedule.schedule_id: v.last_run_status for v in views}
        return Response(
            ScheduleOutputSerializer(
                [v.schedule for v in views], many=True, context={"statuses": statuses}
            ).data
        )


class ScheduleDetailApi(APIView):
    session_roles = (ENGINEER,)  # a staff session's change needs the console's role for it

    class PatchSerializer(ClosedSerializer):
        tenant = StrictCharField(max_length=64, required=False, allow_blank=True)  # with a key: the key's
        enabled = StrictBooleanField(required=False)
        input = serializers.JSONField(required=False)
        overlap = StrictCharField(max_length=20, required=False)
        cron = StrictCharField(max_length=200, required=False)
        interval_seconds = StrictIntegerField(required=False)

    @extend_schema(
        summary="Read a schedule",
        parameters=[TenantParameterSerializer],
        responses={200: ScheduleOutputSerializer, **error_responses()},
    )
    def get(self, request: Request, schedule_id: UUID) -> Response:
        return _one(request, schedule_get(tenant=_tenant(request), schedule_id=schedule_id))

    @extend_schema(
        summary="Pause (enabled=false), resume, or change a schedule; a resume or a new timing counts "
        "slots from now",
        parameters=[TenantParameterSerializer],
        request=PatchSerializer,
        responses={200: ScheduleOutputSerializer, **error_responses(422)},
    )
    def patch(self, request: Request, schedule_id: UUID) -> Response:
        serializer = self.PatchSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        changes: dict[str, Any] = dict(serializer.validated_data)
        changes.pop("tenant", None)  # which tenant's schedule: _tenant(request) reads it
        tenant = _tenant(request)
        schedule_get(tenant=tenant, schedule_id=schedule_id)  # 404 before anything else
        schedule = schedule_update(
            tenant=tenant, schedule_id=schedule_id, actor=request_actor(request), **changes
        )
        return _one(request, schedule)

    @extend_schema(
        summary="Delete a schedule (its runs stay)",
        parameters=[TenantParameterSerializer],
        responses={204: None, **error_responses()},
    )
    def delete(self, request: Request, schedule_id: UUID) -> Response:
        schedule_delete(tenant=_tenant(request), schedule_id=schedule_id, actor=request_actor(request))
        return Response(status=204)


class VersionSerializer(serializers.Serializer):
    version = StrictCharField()
    registered = serializers.BooleanField(help_text="its code is registered in this deployment")
    newest = serializers.BooleanField(help_text="new runs start on it")
    runs = serializers.DictField(child=serializers.IntegerField(), help_text="status -> number of runs")
    active = serializers.IntegerField(help_text="running and suspended runs pinned to it")
    safe_to_remove = serializers.BooleanField()
    drain = StrictCharField(help_text='"safe to remove", or what still holds it')
    holding_run_ids = serializers.ListField(child=serializers.UUIDField(), help_text="some of those runs")


class WorkflowSerializer(serializers.Serializer):
    name = StrictCharField()
    description = StrictCharField()
    versions = VersionSerializer(many=True)


def _version(row: VersionRow) -> dict[str, Any]:
    return {
        "version": row.version,
        "registered": row.registered,
        "newest": row.newest,
        "runs": row.runs,
        "active": row.active,
        "safe_to_remove": row.safe_to_remove,
        "drain": row.drain,
        "holding_run_ids": list(row.holding_run_ids),
    }


def _workflow(row: WorkflowRow) -> dict[str, Any]:
    return {"name": row.name, "description": row.description, "versions": [_version(v) for v in row.versions]}


class WorkflowListApi(APIView):
    @extend_schema(
        summary="Workflows and their versions: runs by status per version, and whether an old version "
        "can be removed (a key sees its tenant's runs, a staff session every tenant's unless it names one)",
        parameters=[TenantParameterSerializer],
        responses={200: WorkflowSerializer(many=True), **error_responses()},
    )
    def get(self, request: Request) -> Response:
        given = request.query_params.get("tenant") or None
        tenant = request_tenant(request, given) if given or request_key(request) is not None else None
        return Response(
            WorkflowSerializer([_workflow(w) for w in workflow_versions(tenant=tenant)], many=True).data
        )
