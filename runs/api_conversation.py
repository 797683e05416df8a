"""REST API for conversations: append and page messages, read the session window, build the context."""

from __future__ import annotations

from uuid import UUID

from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from runs.api import EventOutputSerializer
from runs.context import context_build
from runs.models import AgentEvent
from runs.selectors import run_get
from runs.services.conversation import CONVERSATION_EVENTS, conversation_append
from runs.services.sessions import session_window


def _actor(request: Request) -> str:
    return f"user:{request.user.get_username()}"


class RunMessagesApi(APIView):
    class InputSerializer(serializers.Serializer):
        type = serializers.ChoiceField(choices=CONVERSATION_EVENTS)
        client_message_id = serializers.CharField(max_length=200)
        content = serializers.JSONField(required=False)
        call_id = serializers.CharField(max_length=200, required=False)
        tool = serializers.CharField(max_length=200, required=False)
        arguments = serializers.JSONField(required=False)
        is_error = serializers.BooleanField(required=False, default=False)

    class FilterSerializer(serializers.Serializer):
        after_seq = serializers.IntegerField(min_value=0, default=0)
        limit = serializers.IntegerField(min_value=1, max_value=500, default=100)

    def post(self, request: Request, run_id: UUID) -> Response:
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        body = dict(data.validated_data)
        run = run_get(run_id=run_id)
        appended = conversation_append(tenant=run.tenant, run_id=run_id, event_type=body.pop("type"),
                                       client_message_id=body.pop("client_message_id"), body=body,
                                       actor=_actor(request))  # fmt: skip
        return Response(EventOutputSerializer(appended.event).data, status=201 if appended.created else 200)

    def get(self, request: Request, run_id: UUID) -> Response:
        filters = self.FilterSerializer(data=request.query_params)
        filters.is_valid(raise_exception=True)
        run_get(run_id=run_id)
        events = list(
            AgentEvent.objects.filter(run_id=run_id, event_type__in=CONVERSATION_EVENTS,
                                      seq__gt=filters.validated_data["after_seq"])
            .order_by("seq")[: filters.validated_data["limit"]]
        )  # fmt: skip
        return Response({"results": EventOutputSerializer(events, many=True).data,
                         "next_after_seq": events[-1].seq if events else None})  # fmt: skip


class RunSessionApi(APIView):
    def get(self, request: Request, run_id: UUID) -> Response:
        return Response({"results": session_window(run=run_get(run_id=run_id))})


class RunContextApi(APIView):
    class FilterSerializer(serializers.Serializer):
        model = serializers.CharField(max_length=100, required=False)
        query = serializers.CharField(max_length=2000, required=False, default="")
        # Searches the retrieval index as this user (its ACL); the hits come with a snapshot id.
        principal = serializers.CharField(max_length=210, required=False, allow_null=True, default=None)

    def get(self, request: Request, run_id: UUID) -> Response:
        filters = self.FilterSerializer(data=request.query_params)
        filters.is_valid(raise_exception=True)
        built = context_build(run=run_get(run_id=run_id), **filters.validated_data)
        return Response({"messages": built.messages, "parts": built.parts, "budget": built.budget,
                         "total": built.total, "summaries": built.summaries, "raw_from_seq": built.raw_from_seq,
                         "notes": built.notes})  # fmt: skip
