"""REST API for runs: start (idempotent), read, read events, cancel, resume. One view per action."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from core.tenancy import tenant_get
from runs.models import AgentEvent, AgentRun
from runs.selectors import run_events, run_get
from runs.services.forks import run_fork, run_rewind
from runs.services.runs import run_cancel, run_resume, run_start


class RunOutputSerializer(serializers.ModelSerializer):
    tenant = serializers.CharField(source="tenant.slug")

    class Meta:
        model = AgentRun
        fields = ["run_id", "tenant", "workflow_name", "workflow_version", "state_schema_version", "status",
                  "next_step", "state", "state_revision", "suspend_reason", "suspend_detail", "result",
                  "lease_owner", "lease_expires_at", "lease_epoch", "attempt", "idempotency_key", "subject",
                  "parent_run_id", "fork_seq", "created_at", "updated_at"]  # fmt: skip


class EventOutputSerializer(serializers.ModelSerializer):
    class Meta:
        model = AgentEvent
        fields = ["seq", "event_type", "step_id", "attempt", "payload", "actor", "state_revision",
                  "state_digest", "created_at"]  # fmt: skip


def _actor(request: Request) -> str:
    return f"user:{request.user.get_username()}"


class RunStartApi(APIView):
    class InputSerializer(serializers.Serializer):
        tenant = serializers.CharField(max_length=64)
        workflow = serializers.CharField(max_length=200)
        workflow_version = serializers.CharField(max_length=50, required=False)
        input = serializers.JSONField()
        subject = serializers.CharField(max_length=200, required=False, default="")

    def post(self, request: Request) -> Response:
        data: dict[str, Any] = self._validated(request)
        started = run_start(
            tenant=tenant_get(slug_or_id=data["tenant"]),
            workflow_name=data["workflow"],
            workflow_version=data.get("workflow_version"),
            input=data["input"],
            actor=_actor(request),
            idempotency_key=request.headers.get("Idempotency-Key"),
            subject=data.get("subject", ""),
        )
        return Response(RunOutputSerializer(started.run).data, status=201 if started.created else 200)

    def _validated(self, request: Request) -> dict[str, Any]:
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        return dict(serializer.validated_data)


class RunDetailApi(APIView):
    def get(self, request: Request, run_id: UUID) -> Response:
        return Response(RunOutputSerializer(run_get(run_id=run_id)).data)


class RunEventsApi(APIView):
    class FilterSerializer(serializers.Serializer):
        after_seq = serializers.IntegerField(min_value=0, default=0)
        limit = serializers.IntegerField(min_value=1, max_value=1000, default=100)

    def get(self, request: Request, run_id: UUID) -> Response:
        filters = self.FilterSerializer(data=request.query_params)
        filters.is_valid(raise_exception=True)
        run_get(run_id=run_id)
        events = run_events(run_id=run_id, **filters.validated_data)
        return Response({"results": EventOutputSerializer(events, many=True).data,
                         "next_after_seq": events[-1].seq if events else None})  # fmt: skip


class NoteInputSerializer(serializers.Serializer):
    note = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")


class RunCancelApi(APIView):
    def post(self, request: Request, run_id: UUID) -> Response:
        data = NoteInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        run = run_cancel(run_id=run_id, actor=_actor(request), note=data.validated_data["note"])
        return Response(RunOutputSerializer(run).data)


class RunResumeApi(APIView):
    def post(self, request: Request, run_id: UUID) -> Response:
        data = NoteInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        run = run_resume(run_id=run_id, actor=_actor(request), note=data.validated_data["note"])
        return Response(RunOutputSerializer(run).data)


class RunForkApi(APIView):
    class InputSerializer(serializers.Serializer):
        at_seq = serializers.IntegerField(min_value=1)
        start = serializers.BooleanField(required=False, default=True)
        note = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")

    def post(self, request: Request, run_id: UUID) -> Response:
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        child = run_fork(run_id=run_id, actor=_actor(request), **data.validated_data)
        return Response(RunOutputSerializer(child).data, status=201)


class RunRewindApi(APIView):
    class InputSerializer(serializers.Serializer):
        to_seq = serializers.IntegerField(min_value=1)
        note = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")

    def post(self, request: Request, run_id: UUID) -> Response:
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        child = run_rewind(run_id=run_id, actor=_actor(request), **data.validated_data)
        return Response(RunOutputSerializer(child).data, status=201)
