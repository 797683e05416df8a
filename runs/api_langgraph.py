"""REST API for LangGraph threads: read what a thread's interrupt() calls ask and answer them with a
tenant key, as the console does."""

from __future__ import annotations

from uuid import UUID

from drf_spectacular.utils import OpenApiExample, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api import ClosedSerializer, StrictCharField, error_responses
from core.api_auth import request_actor
from core.roles import ENGINEER, SUPPORT
from runs.api import run_for_request
from runs.kernel.errors import RunNotFound
from runs.langgraph.interrupts import interrupt_answer, thread_interrupt_get


class AnswerOutputSerializer(serializers.Serializer):
    run_id = serializers.UUIDField()
    thread_id = StrictCharField()
    seq = serializers.IntegerField(help_text="The seq of the langgraph_interrupt_answered event")
    checkpoint_id = StrictCharField()
    interrupt_id = StrictCharField()
    answer = serializers.JSONField(source="value")
    answered_by = StrictCharField(source="actor")
    graph = StrictCharField(help_text="The registered graph a worker resumes; empty: the caller's")
    created = serializers.BooleanField(help_text="False: this interrupt had been answered already")


class QuestionSerializer(serializers.Serializer):
    interrupt_id = StrictCharField()
    value = serializers.JSONField(help_text="What the graph passed to interrupt()")


class GivenSerializer(serializers.Serializer):
    interrupt_id = StrictCharField()
    seq = serializers.IntegerField(help_text="The seq of the langgraph_interrupt_answered event")
    answer = serializers.JSONField(source="value")
    answered_by = StrictCharField(source="actor")


class QuestionsOutputSerializer(serializers.Serializer):
    run_id = serializers.UUIDField()
    thread_id = StrictCharField()
    checkpoint_id = StrictCharField(help_text="The interrupted checkpoint; empty: none")
    waiting = StrictCharField(source="reason", help_text="langgraph_interrupt: a person must answer")
    open = QuestionSerializer(
        many=True,
        source="asked",
        help_text="Unanswered questions, one per interrupting task of the superstep",
    )
    answered = GivenSerializer(many=True, source="answers")
    graph = StrictCharField()


class LangGraphAnswerApi(APIView):
    session_roles = (SUPPORT, ENGINEER)  # a staff session's change needs the console's role for it

    class InputSerializer(ClosedSerializer):
        answer = serializers.JSONField(help_text="The Command(resume=...) value: any JSON but null")
        checkpoint_id = StrictCharField(max_length=200, required=False)
        interrupt_id = StrictCharField(max_length=200, required=False)
        note = StrictCharField(max_length=2000, required=False, allow_blank=True, default="")

    @extend_schema(
        summary="What a LangGraph thread's interrupts ask: every open question of its superstep",
        responses={200: QuestionsOutputSerializer, **error_responses(404)},
    )
    def get(self, request: Request, run_id: UUID) -> Response:
        run = run_for_request(request, run_id)
        thread = thread_interrupt_get(tenant_id=run.tenant_id, run_id=run.run_id)
        if thread is None:
            raise RunNotFound("no such active LangGraph thread", code="langgraph_thread_not_found")
        return Response(QuestionsOutputSerializer(thread).data)

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
