"""REST API for signals and queries: send a named signal to a run, read a declared view of its state."""

from __future__ import annotations

from uuid import UUID

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api import StrictCharField, error_responses
from core.api_auth import request_actor
from core.roles import ENGINEER, SUPPORT
from runs.api import EventOutputSerializer, run_for_request
from runs.engine.signals import query_read, signal_send


class RunSignalApi(APIView):
    session_roles = (SUPPORT, ENGINEER)  # a staff session's change needs the console's role for it

    @extend_schema(
        summary="Send a signal to a run (the body is its JSON payload; idempotent by Idempotency-Key)",
        parameters=[
            OpenApiParameter(
                "Idempotency-Key",
                str,
                OpenApiParameter.HEADER,
                required=True,
                description="The same key again returns the first signal's event and stores nothing.",
            )
        ],
        request={"application/json": OpenApiTypes.ANY},
        responses={201: EventOutputSerializer, 200: EventOutputSerializer, **error_responses(409, 422)},
        examples=[OpenApiExample("shipped", value={"tracking": "ZX-1"}, request_only=True)],
    )
    def post(self, request: Request, run_id: UUID, name: str) -> Response:
        run_for_request(request, run_id)
        sent = signal_send(
            run_id=run_id,
            name=name,
            payload=request.data,
            idempotency_key=request.headers.get("Idempotency-Key", ""),
            actor=request_actor(request),
        )
        return Response(EventOutputSerializer(sent.event).data, status=201 if sent.created else 200)


class RunQueryApi(APIView):
    @extend_schema(
        summary="Read a query a run's workflow declares (a view of its state; changes nothing; 409 query_failed if it breaks)",
        responses={
            200: inline_serializer(
                "QueryAnswer", {"query": StrictCharField(), "answer": serializers.JSONField()}
            ),
            **error_responses(409),
        },
    )
    def get(self, request: Request, run_id: UUID, name: str) -> Response:
        run_for_request(request, run_id)
        return Response({"query": name, "answer": query_read(run_id=run_id, name=name)})
