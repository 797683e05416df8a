"""REST API for long-term memory. One view per action; the tenant is explicit."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from django.http import HttpResponse
from drf_spectacular.utils import OpenApiExample, OpenApiResponse, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api import (
    ClosedSerializer,
    ErrorSerializer,
    QuerySerializer,
    StrictCharField,
    StrictFloatField,
    StrictIntegerField,
    TenantParameterSerializer,
    error_responses,
)
from core.api_auth import request_actor, request_key, request_tenant
from core.roles import COMPLIANCE
from memory.confirmation import pending_confirm
from memory.consent import CONSENT_BASES
from memory.filememory import memory_md_apply, memory_md_render, write_memory
from memory.models import MemoryItem
from memory.policy import provenance_of_writer
from memory.projection import memory_search
from memory.selectors import memory_recall
from memory.services import memory_invalidate, memory_remember, memory_supersede

# A claim that looks like poisoning is held in the review queue, not kept (memory/poisoning).
HELD = OpenApiResponse(
    ErrorSerializer,
    description="held for review (it looks like an instruction, a permission change, a policy override "
    "or hidden text): not kept; error.details.held_id names it",
)


class MemoryItemOutputSerializer(serializers.ModelSerializer):
    class Meta:
        model = MemoryItem
        fields = [
            "memory_id",
            "subject_id",
            "namespace",
            "key",
            "value",
            "schema_version",
            "provenance",
            "confidence",
            "valid_from",
            "expires_at",
            "invalidated_at",
            "invalidation_reason",
            "supersedes",
            "consent_basis",
            "created_at",
        ]


EXAMPLE_PROVENANCE = {
    "source_type": "user_statement",
    "source_id": "run:7b0c…",
    "source_version": None,
    "run_id": "7b0c…",
    "event_seq": 3,
    "validation_method": "user_statement",
}
MEMORY_ITEM_LIST = inline_serializer("MemoryItemList", {"results": MemoryItemOutputSerializer(many=True)})
MEMORY_HITS = inline_serializer(
    "MemoryHits",
    {
        "results": inline_serializer(
            "MemoryHit",
            {
                "score": serializers.FloatField(),
                "vector_rank": serializers.IntegerField(allow_null=True),
                "text_rank": serializers.IntegerField(allow_null=True),
                "item": MemoryItemOutputSerializer(),
            },
            many=True,
        )
    },
)


class MemoryItemsApi(APIView):
    session_roles = (COMPLIANCE,)  # a staff session's change needs the console's role for it

    class InputSerializer(ClosedSerializer):
        tenant = StrictCharField(
            max_length=64, required=False, allow_blank=True
        )  # with an API key: the key's
        subject_id = StrictCharField(max_length=200, trim_whitespace=False)
        namespace = StrictCharField(max_length=200)
        key = StrictCharField(max_length=200)
        value = serializers.JSONField()
        provenance = serializers.DictField()
        confidence = StrictFloatField(required=False, allow_null=True, default=None)
        consent_basis = serializers.ChoiceField(
            choices=CONSENT_BASES, required=False, allow_null=True, default=None
        )  # none: from the provenance (memory/consent.py consent_default)

    class FilterSerializer(QuerySerializer):
        tenant = StrictCharField(
            max_length=64, required=False, allow_blank=True
        )  # with an API key: the key's
        subject_id = StrictCharField(max_length=200, trim_whitespace=False)
        namespace = StrictCharField(max_length=200, required=False)

    @extend_schema(
        summary="Remember a fact about a subject",
        request=InputSerializer,
        responses={201: MemoryItemOutputSerializer, 202: HELD, **error_responses(409, 422)},
        examples=[
            OpenApiExample(
                "preference",
                value={
                    "tenant": "acme",
                    "subject_id": "customer-7",
                    "namespace": "preferences",
                    "key": "language",
                    "value": "de",
                    "provenance": EXAMPLE_PROVENANCE,
                },
                request_only=True,
            )
        ],
    )
    def post(self, request: Request) -> Response:
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        fields = dict(data.validated_data)
        provenance_of_writer(fields["provenance"], operator=request_key(request) is None)
        item = memory_remember(tenant=request_tenant(request, fields.pop("tenant", None)), **fields)
        return Response(MemoryItemOutputSerializer(item).data, status=201)

    @extend_schema(
        summary="Recall a subject's current facts",
        parameters=[FilterSerializer],
        responses={200: MEMORY_ITEM_LIST, **error_responses()},
    )
    def get(self, request: Request) -> Response:
        f = self.FilterSerializer(data=request.query_params)
        f.is_valid(raise_exception=True)
        namespace = f.validated_data.get("namespace")
        items = memory_recall(
            tenant=request_tenant(request, f.validated_data.get("tenant")),
            subject_id=f.validated_data["subject_id"],
            namespaces=[namespace] if namespace else None,
        )
        return Response({"results": MemoryItemOutputSerializer(items, many=True).data})


class MemoryItemSupersedeApi(APIView):
    session_roles = (COMPLIANCE,)  # a staff session's change needs the console's role for it

    class InputSerializer(ClosedSerializer):
        tenant = StrictCharField(
            max_length=64, required=False, allow_blank=True
        )  # with an API key: the key's
        value = serializers.JSONField()
        provenance = serializers.DictField()
        confidence = StrictFloatField(required=False, allow_null=True, default=None)

    @extend_schema(
        summary="Replace a fact with a new value",
        request=InputSerializer,
        responses={201: MemoryItemOutputSerializer, 202: HELD, **error_responses(409, 422)},
        examples=[
            OpenApiExample(
                "new value",
                value={"tenant": "acme", "value": "en", "provenance": EXAMPLE_PROVENANCE},
                request_only=True,
            )
        ],
    )
    def post(self, request: Request, memory_id: UUID) -> Response:
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        fields = dict(data.validated_data)
        provenance_of_writer(fields["provenance"], operator=request_key(request) is None)
        item = memory_supersede(
            tenant=request_tenant(request, fields.pop("tenant", None)), memory_id=memory_id, **fields
        )
        return Response(MemoryItemOutputSerializer(item).data, status=201)


class MemoryItemInvalidateApi(APIView):
    session_roles = (COMPLIANCE,)  # a staff session's change needs the console's role for it

    class InputSerializer(ClosedSerializer):
        tenant = StrictCharField(
            max_length=64, required=False, allow_blank=True
        )  # with an API key: the key's
        reason = StrictCharField(max_length=500)

    @extend_schema(
        summary="Invalidate a fact",
        request=InputSerializer,
        responses={200: MemoryItemOutputSerializer, **error_responses(409, 422)},
        examples=[
            OpenApiExample(
                "wrong", value={"tenant": "acme", "reason": "the customer corrected it"}, request_only=True
            )
        ],
    )
    def post(self, request: Request, memory_id: UUID) -> Response:
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        item = memory_invalidate(
            tenant=request_tenant(request, data.validated_data.get("tenant")),
            memory_id=memory_id,
            reason=data.validated_data["reason"],
        )
        return Response(MemoryItemOutputSerializer(item).data)


class MemorySearchApi(APIView):
    class FilterSerializer(QuerySerializer):
        tenant = StrictCharField(
            max_length=64, required=False, allow_blank=True
        )  # with an API key: the key's
        query = StrictCharField(max_length=2000)
        subject_id = StrictCharField(max_length=200, trim_whitespace=False, required=False)
        k = serializers.IntegerField(min_value=1, max_value=100, default=10)

    class InputSerializer(FilterSerializer):
        """The same fields as a JSON body, each of its JSON type (a number is not a query)."""

        tenant = StrictCharField(max_length=64, required=False, allow_blank=True)
        query = StrictCharField(max_length=2000)
        subject_id = StrictCharField(max_length=200, trim_whitespace=False, required=False)
        k = StrictIntegerField(min_value=1, max_value=100, default=10)

    # POST takes the same fields as a JSON body: a query of 2,000 letters of Cyrillic or Chinese is
    # longer percent-encoded than a request line may be. A search either way: a read key may POST it.
    reads_by_post = True

    @extend_schema(
        summary="Search memory (vector and full text)",
        parameters=[FilterSerializer],
        responses={200: MEMORY_HITS, **error_responses(422)},
    )
    def get(self, request: Request) -> Response:
        return self._search(request, self.FilterSerializer(data=request.query_params))

    @extend_schema(
        summary="Search memory (vector and full text), the fields as a JSON body (for long queries)",
        request=InputSerializer,
        examples=[
            OpenApiExample(
                "search",
                value={"tenant": "acme", "query": "preferred delivery", "subject_id": "cust-1", "k": 5},
                request_only=True,
            )
        ],
        responses={200: MEMORY_HITS, **error_responses(422)},
    )
    def post(self, request: Request) -> Response:
        return self._search(request, self.InputSerializer(data=request.data))

    def _search(self, request: Request, f: serializers.Serializer[Any]) -> Response:
        f.is_valid(raise_exception=True)
        hits = memory_search(
            tenant=request_tenant(request, f.validated_data.get("tenant")),
            query=f.validated_data["query"],
            subject_id=f.validated_data.get("subject_id"),
            k=f.validated_data["k"],
        )
        return Response(
            {
                "results": [
                    {
                        "score": h.score,
                        "vector_rank": h.vector_rank,
                        "text_rank": h.text_rank,
                        "item": MemoryItemOutputSerializer(h.item).data,
                    }
                    for h in hits
                ]
            }
        )


class MemoryWriteApi(APIView):
    """The write_memory tool of external agents: one claim or a free text note, with its source."""

    session_roles = (COMPLIANCE,)  # a staff session's change needs the console's role for it

    class InputSerializer(ClosedSerializer):
        tenant = StrictCharField(
            max_length=64, required=False, allow_blank=True
        )  # with an API key: the key's
        subject_id = StrictCharField(max_length=200, trim_whitespace=False)
        text = StrictCharField(max_length=4000, required=False)
        namespace = StrictCharField(max_length=200, required=False)
        key = StrictCharField(max_length=200, required=False)
        value = serializers.JSONField(required=False)
        source = StrictCharField(max_length=500)  # type: ignore[assignment]  # the field named "source"
        consent_basis = serializers.ChoiceField(choices=CONSENT_BASES)
        run_id = StrictCharField(max_length=64, required=False, allow_null=True, default=None)
        event_seq = StrictIntegerField(required=False, allow_null=True, default=None, min_value=0)

    @extend_schema(
        summary="write_memory: keep a claim or a note about a subject, with its source",
        request=InputSerializer,
        responses={201: MemoryItemOutputSerializer, 202: HELD, **error_responses(409, 422)},
        examples=[
            OpenApiExample(
                "claim",
                value={
                    "tenant": "acme",
                    "subject_id": "customer-7",
                    "namespace": "preference",
                    "key": "language",
                    "value": "de",
                    "source": "agent:helpdesk",
                    "consent_basis": "explicit",
                },
                request_only=True,
            )
        ],
    )
    def post(self, request: Request) -> Response:
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        fields = dict(data.validated_data)
        item = write_memory(tenant=request_tenant(request, fields.pop("tenant", None)), **fields)
        return Response(MemoryItemOutputSerializer(item).data, status=201)


class MemoryFileApi(APIView):
    """A subject's MEMORY.md: GET renders it, PUT writes an edited one back as claims."""

    session_roles = (COMPLIANCE,)  # a staff session's change needs the console's role for it

    class InputSerializer(ClosedSerializer):
        tenant = StrictCharField(
            max_length=64, required=False, allow_blank=True
        )  # with an API key: the key's
        # Its size is the service's to refuse, with a 413 naming the limits (memory/filememory.py).
        content = StrictCharField(allow_blank=True, trim_whitespace=False)
        # The basis of the lines that name none; none given: such a line in a category or namespace
        # whose policy needs one waits for the subject's confirmation.
        consent_basis = serializers.ChoiceField(
            choices=CONSENT_BASES, required=False, allow_null=True, default=None
        )

    @extend_schema(
        summary="A subject's MEMORY.md (current claims with their provenance, as markdown)",
        parameters=[TenantParameterSerializer],
        responses={(200, "text/markdown"): str, **error_responses()},
    )
    def get(self, request: Request, subject: str) -> HttpResponse:
        tenant = request_tenant(request, request.query_params.get("tenant", ""))
        return HttpResponse(
            memory_md_render(tenant=tenant, subject_id=subject), content_type="text/markdown; charset=utf-8"
        )

    @extend_schema(
        summary="Write an edited MEMORY.md back (all or nothing; bad lines are named)",
        request=InputSerializer,
        examples=[
            OpenApiExample(
                "edit",
                value={
                    "tenant": "acme",
                    "content": '# MEMORY.md of customer-7\n\n## preference\n- preference/language: "en"'
                    '  <!-- id=0b6c1f9e-3a52-4f5e-9a43-6f1d2c3b4a59 -->\n- constraint/contact: "email only"'
                    "  <!-- consent=explicit -->\n",
                },
                request_only=True,
            )
        ],
        responses={
            200: inline_serializer(
                "MemoryFileEdit",
                {
                    "added": serializers.IntegerField(),
                    "superseded": serializers.IntegerField(),
                    "invalidated": serializers.IntegerField(),
                    "unchanged": serializers.IntegerField(),
                    "held": serializers.ListField(child=serializers.DictField()),
                },
            ),
            **error_responses(409, 413, 422),
        },
    )
    def put(self, request: Request, subject: str) -> Response:
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        edit = memory_md_apply(
            tenant=request_tenant(request, data.validated_data.get("tenant")),
            subject_id=subject,
            text=data.validated_data["content"],
            editor=request_actor(request),
            # Trust comes from who writes: a person signed in with a role is an operator, a key is not.
            operator=request_key(request) is None,
            consent_basis=data.validated_data["consent_basis"],
        )
        return Response(edit.as_json())


class MemoryPendingConfirmApi(APIView):
    session_roles = (COMPLIANCE,)  # a staff session's change needs the console's role for it

    class InputSerializer(ClosedSerializer):
        tenant = StrictCharField(
            max_length=64, required=False, allow_blank=True
        )  # with an API key: the key's
        subject_id = StrictCharField(max_length=200, trim_whitespace=False, required=False)

    @extend_schema(
        summary="The subject confirms an inferred claim: it becomes memory (consent basis explicit)",
        request=InputSerializer,
        examples=[
            OpenApiExample("confirm", value={"tenant": "acme", "subject_id": "customer-7"}, request_only=True)
        ],
        responses={201: MemoryItemOutputSerializer, **error_responses(409, 422)},
    )
    def post(self, request: Request, pending_id: UUID) -> Response:
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        item = pending_confirm(
            tenant=request_tenant(request, data.validated_data.get("tenant")),
            pending_id=pending_id,
            actor=request_actor(request),
            subject_id=data.validated_data.get("subject_id"),
        )
        return Response(MemoryItemOutputSerializer(item).data, status=201)
