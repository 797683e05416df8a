"""REST API for LangGraph threads: answer a thread's interrupt() with a tenant key, as the console does."""

from __future__ import annotations

from uuid import UUID

from drf_spectacular.utils import OpenApiExample, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api import error_responses
from core.api_auth import request_actor
from runs.api import run_for_request
from runs.langgraph.interrupts import interrupt_answer


class AnswerOutputSerializer(serializers.Serializer):
    run_id = serializers.UUIDField()
    thread_id = serializers.CharField()
    seq = serializers.IntegerField(help_text="The seq of the langgraph_interrupt_answered event")
    checkpoint_id = serializers.CharField()
    interrupt_id = serializers.CharField()
    answer = serializers.JSONField(source="value")
    answered_by = serializers.CharField(source="actor")
    graph = serializers.CharField(help_text="The registered graph a worker resumes; empty: the caller's")
    created = serializers.BooleanField(help_text="False: this interrupt had been answered already")


class LangGraphAnswerApi(APIView):
    class InputSerializer(serializers.Serializer):
        answer = serializers.JSONField(help_text="The Command(resume=...) value: any JSON but null")
        checkpoint_id = serializers.CharField(max_length=200, required=False)
        interrupt_id = serializers.CharField(max_length=200, required=False)
        note = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")

    @extend_schema(
        summary="Answer a LangGraph thread's interrupt (once per checkpoint and interrupt id)",
        request=InputSerializer,
        responses={201: AnswerOutputSerializer, 200: AnswerOutputSerializer, **error_responses(404, 422)},
        examples=[OpenApiExample("answer", value={"answer": {"approved": True}}, request_only=True)],
    )
    def post(self, request: Request, run_id: UUID) -> Response:
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        run = run_for_request(request, run_id)
        answer = interrupt_answer(
            tenant_id=run.tenant_id,
            run_id=run.run_id,
            actor=request_actor(request),
            **data.validated_data,
        )
        return Response(AnswerOutputSerializer(answer).data, status=201 if answer.created else 200)
