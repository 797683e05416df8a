"""REST API for runs: start (idempotent), read, read events, cancel, resume. One view per action."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from drf_spectacular.utils import OpenApiExample, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api import error_responses
from core.api_auth import request_actor, request_may_see, request_tenant
from runs.errors import RunNotFound
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


def run_for_request(request: Request, run_id: UUID) -> AgentRun:
    """The run, if this request may see it; a run of another tenant does not exist for an API key."""
    run = run_get(run_id=run_id)
    if not request_may_see(request, run.tenant_id):
        raise RunNotFound(f"no run {run_id}")
    return run


EVENTS_PAGE = inline_serializer(
    "EventsPage",
    {
        "results": EventOutputSerializer(many=True),
        "next_after_seq": serializers.IntegerField(allow_null=True),
    },
)


class RunStartApi(APIView):
    class InputSerializer(serializers.Serializer):
        tenant = serializers.CharField(
            max_length=64, required=False, allow_blank=True
        )  # with an API key: the key's
        workflow = serializers.CharField(max_length=200)
        workflow_version = serializers.CharField(max_length=50, required=False)
        input = serializers.JSONField()
        subject = serializers.CharField(max_length=200, required=False, default="")

    @extend_schema(
        summary="Start a run (idempotent with an Idempotency-Key header)",
        request=InputSerializer,
        responses={201: RunOutputSerializer, 200: RunOutputSerializer, **error_responses(409, 422)},
        examples=[
            OpenApiExample(
                "countdown",
                value={"tenant": "acme", "workflow": "demo.countdown", "input": {"n": 3}},
                request_only=True,
            )
        ],  # fmt: skip
    )
    def post(self, request: Request) -> Response:
        data: dict[str, Any] = self._validated(request)
        started = run_start(
            tenant=request_tenant(request, data.get("tenant")),
            workflow_name=data["workflow"],
            workflow_version=data.get("workflow_version"),
            input=data["input"],
            actor=request_actor(request),
            idempotency_key=request.headers.get("Idempotency-Key"),
            subject=data.get("subject", ""),
        )
        return Response(RunOutputSerializer(started.run).data, status=201 if started.created else 200)

    def _validated(self, request: Request) -> dict[str, Any]:
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        return dict(serializer.validated_data)


class RunDetailApi(APIView):
    @extend_schema(summary="Read a run", responses={200: RunOutputSerializer, **error_responses()})
    def get(self, request: Request, run_id: UUID) -> Response:
        return Response(RunOutputSerializer(run_for_request(request, run_id)).data)


class RunEventsApi(APIView):
    class FilterSerializer(serializers.Serializer):
        after_seq = serializers.IntegerField(min_value=0, default=0)
        limit = serializers.IntegerField(min_value=1, max_value=1000, default=100)

    @extend_schema(summary="Read a run's events", parameters=[FilterSerializer],
                   responses={200: EVENTS_PAGE, **error_responses()})  # fmt: skip
    def get(self, request: Request, run_id: UUID) -> Response:
        filters = self.FilterSerializer(data=request.query_params.dict())
        filters.is_valid(raise_exception=True)
        run_for_request(request, run_id)
        events = run_events(run_id=run_id, **filters.validated_data)
        return Response({"results": EventOutputSerializer(events, many=True).data,
                         "next_after_seq": events[-1].seq if events else None})  # fmt: skip


class NoteInputSerializer(serializers.Serializer):
    note = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")


class RunCancelApi(APIView):
    @extend_schema(summary="Cancel a run", request=NoteInputSerializer,
                   responses={200: RunOutputSerializer, **error_responses(409, 422)},
                   examples=[OpenApiExample("note", value={"note": "duplicate request"}, request_only=True)])  # fmt: skip
    def post(self, request: Request, run_id: UUID) -> Response:
        data = NoteInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        run_for_request(request, run_id)
        run = run_cancel(run_id=run_id, actor=request_actor(request), note=data.validated_data["note"])
        return Response(RunOutputSerializer(run).data)


class RunResumeApi(APIView):
    @extend_schema(summary="Ask for a suspended run to resume (a worker verifies it)", request=NoteInputSerializer,
                   responses={200: RunOutputSerializer, **error_responses(409, 422)},
                   examples=[OpenApiExample("note", value={"note": "stock arrived"}, request_only=True)])  # fmt: skip
    def post(self, request: Request, run_id: UUID) -> Response:
        data = NoteInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        run_for_request(request, run_id)
        run = run_resume(run_id=run_id, actor=request_actor(request), note=data.validated_data["note"])
        return Response(RunOutputSerializer(run).data)


class RunForkApi(APIView):
    class InputSerializer(serializers.Serializer):
        at_seq = serializers.IntegerField(min_value=1)
        start = serializers.BooleanField(required=False, default=True)
        note = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")

    @extend_schema(summary="Fork a run at an event", request=InputSerializer,
                   responses={201: RunOutputSerializer, **error_responses(409, 422)},
                   examples=[OpenApiExample("fork", value={"at_seq": 3, "note": "try again"}, request_only=True)])  # fmt: skip
    def post(self, request: Request, run_id: UUID) -> Response:
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        run_for_request(request, run_id)
        child = run_fork(run_id=run_id, actor=request_actor(request), **data.validated_data)
        return Response(RunOutputSerializer(child).data, status=201)


class RunRewindApi(APIView):
    class InputSerializer(serializers.Serializer):
        to_seq = serializers.IntegerField(min_value=1)
        note = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")

    @extend_schema(summary="Rewind a run to an event (as a new run)", request=InputSerializer,
                   responses={201: RunOutputSerializer, **error_responses(409, 422)},
                   examples=[OpenApiExample("rewind", value={"to_seq": 2}, request_only=True)])  # fmt: skip
    def post(self, request: Request, run_id: UUID) -> Response:
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        run_for_request(request, run_id)
        child = run_rewind(run_id=run_id, actor=request_actor(request), **data.validated_data)
        return Response(RunOutputSerializer(child).data, status=201)
