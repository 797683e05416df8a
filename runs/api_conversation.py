"""REST API for conversations: append and page messages, read the session window, build the context."""

from __future__ import annotations

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
from core.api_auth import request_actor
from core.roles import ENGINEER, SUPPORT
from runs.api import EVENTS_PAGE, EventOutputSerializer, run_for_request
from runs.conversations.context import context_build
from runs.conversations.messages import CONVERSATION_EVENTS, conversation_append
from runs.conversations.procedures import run_procedures_learn
from runs.conversations.sessions import session_window
from runs.kernel.models import AgentEvent


class RunMessagesApi(APIView):
    session_roles = (SUPPORT, ENGINEER)  # a staff session's change needs the console's role for it

    class InputSerializer(ClosedSerializer):
        type = serializers.ChoiceField(choices=CONVERSATION_EVENTS)
        client_message_id = StrictCharField(max_length=200)
        content = serializers.JSONField(required=False)
        call_id = StrictCharField(max_length=200, required=False)
        tool = StrictCharField(max_length=200, required=False)
        arguments = serializers.JSONField(required=False)
        is_error = StrictBooleanField(required=False, default=False)
        # An assistant_message's answer to a user message of the run (its seq): a turn procedures learn.
        in_reply_to = StrictIntegerField(min_value=1, required=False)

    class FilterSerializer(QuerySerializer):
        after_seq = serializers.IntegerField(min_value=0, default=0)
        limit = serializers.IntegerField(min_value=1, max_value=500, default=100)

    @extend_schema(
        summary="Append a message (idempotent by client_message_id; the same id with another message is 409)",
        request=InputSerializer,
        responses={201: EventOutputSerializer, 200: EventOutputSerializer, **error_responses(409, 422)},
        examples=[
            OpenApiExample(
                "user message",
                value={"type": "user_message", "client_message_id": "m-1", "content": "Where is my order?"},
                request_only=True,
            )
        ],
    )
    def post(self, request: Request, run_id: UUID) -> Response:
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        body = dict(data.validated_data)
        run = run_for_request(request, run_id)
        appended = conversation_append(
            tenant=run.tenant,
            run_id=run_id,
            event_type=body.pop("type"),
            client_message_id=body.pop("client_message_id"),
            body=body,
            actor=request_actor(request),
        )
        return Response(EventOutputSerializer(appended.event).data, status=201 if appended.created else 200)

    @extend_schema(
        summary="Page a run's conversation",
        parameters=[FilterSerializer],
        responses={200: EVENTS_PAGE, **error_responses()},
    )
    def get(self, request: Request, run_id: UUID) -> Response:
        filters = self.FilterSerializer(data=request.query_params)
        filters.is_valid(raise_exception=True)
        run_for_request(request, run_id)
        events = list(
            AgentEvent.objects.filter(
                run_id=run_id, event_type__in=CONVERSATION_EVENTS, seq__gt=filters.validated_data["after_seq"]
            ).order_by("seq")[: filters.validated_data["limit"]]
        )
        return Response(
            {
                "results": EventOutputSerializer(events, many=True).data,
                "next_after_seq": events[-1].seq if events else None,
            }
        )


class RunSessionApi(APIView):
    @extend_schema(
        summary="The session window of a run",
        responses={
            200: inline_serializer(
                "SessionWindow", {"results": serializers.ListField(child=serializers.JSONField())}
            ),
            **error_responses(),
        },
    )
    def get(self, request: Request, run_id: UUID) -> Response:
        return Response({"results": session_window(run=run_for_request(request, run_id))})


class RunContextApi(APIView):
    class FilterSerializer(QuerySerializer):
        model = StrictCharField(max_length=100, required=False)
        query = StrictCharField(max_length=2000, required=False, default="")
        # Searches the retrieval index as this user (its ACL); the hits come with a snapshot id.
        principal = StrictCharField(max_length=210, required=False, allow_null=True, default=None)

    @extend_schema(
        summary="Build the context of a run's next model call",
        parameters=[FilterSerializer],
        responses={
            200: inline_serializer(
                "BuiltContext",
                {
                    "messages": serializers.ListField(child=serializers.JSONField()),
                    "parts": serializers.JSONField(),
                    "budget": serializers.JSONField(),
                    "total": serializers.JSONField(),
                    "summaries": serializers.JSONField(),
                    "raw_from_seq": serializers.JSONField(),
                    "notes": serializers.JSONField(),
                    "procedure": serializers.JSONField(allow_null=True),
                },
            ),
            **error_responses(422),
        },
    )
    def get(self, request: Request, run_id: UUID) -> Response:
        filters = self.FilterSerializer(data=request.query_params)
        filters.is_valid(raise_exception=True)
        built = context_build(run=run_for_request(request, run_id), **filters.validated_data)
        return Response(
            {
                "messages": built.messages,
                "parts": built.parts,
                "budget": built.budget,
                "total": built.total,
                "summaries": built.summaries,
                "raw_from_seq": built.raw_from_seq,
                "notes": built.notes,
                "procedure": built.procedure,
            }
        )


class RunProceduresLearnApi(APIView):
    session_roles = (SUPPORT, ENGINEER)  # a staff session's change needs the console's role for it

    @extend_schema(
        summary="Learn the procedures of a run's answered turns now (they wait for a person to confirm them)",
        request=None,
        responses={
            200: inline_serializer(
                "ProceduresLearned",
                {
                    "proposed": serializers.IntegerField(),
                    "added": serializers.IntegerField(),
                    "unchanged": serializers.IntegerField(),
                    "procedure_ids": serializers.ListField(child=serializers.UUIDField()),
                },
            ),
            **error_responses(404),
        },
    )
    def post(self, request: Request, run_id: UUID) -> Response:
        run = run_for_request(request, run_id)
        return Response(run_procedures_learn(run_id=run.run_id).as_json())
