"""REST API for retrieval: documents (index, ACL, delete), principals, search, snapshots and replay.

A document's content comes as a multipart file upload (`file`) or, in JSON, as `text` or
`content_base64`. The tenant is explicit on every call.

Just over 400 lines: one view per route of the retrieval API, each thin, kept in one file as
routed in retrieval/urls.py.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from django.core.files.uploadedfile import UploadedFile
from django.utils.datastructures import MultiValueDict
from drf_spectacular.utils import OpenApiExample, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api import (
    ClosedSerializer,
    QuerySerializer,
    StrictBooleanField,
    StrictCharField,
    StrictIntegerField,
    TenantParameterSerializer,
    error_responses,
)
from core.api_auth import request_actor, request_run_tenant, request_tenant
from core.errors import InvalidInput
from core.parsers import JSONParser
from core.roles import ENGINEER
from core.tenancy import tenant_scope
from retrieval.models import Document, Invalidation, RetrievalSnapshot
from retrieval.search import retrieval_search
from retrieval.selectors import document_get, documents_page, invalidations_page
from retrieval.services import (
    document_acl_set,
    document_delete,
    document_index,
    principal_remove,
    principal_set,
)
from retrieval.snapshots import snapshot_get, snapshot_replay
from retrieval.sources import MEDIA_TYPES, media_type_guess


class DocumentOutputSerializer(serializers.ModelSerializer):
    chunks = serializers.SerializerMethodField()

    class Meta:
        model = Document
        fields = [
            "document_id",
            "source_uri",
            "source_version",
            "source_digest",
            "media_type",
            "title",
            "acl",
            "status",
            "index_version",
            "created_at",
            "updated_at",
            "indexed_at",
            "chunks",
        ]

    def get_chunks(self, document: Document) -> dict[str, int]:
        counts: dict[str, int] = {}
        for status in document.chunks.filter(tenant_id=document.tenant_id).values_list("status", flat=True):
            counts[status] = counts.get(status, 0) + 1
        return counts


class InvalidationOutputSerializer(serializers.ModelSerializer):
    document_id = StrictCharField(source="document_id_text", allow_null=True)

    class Meta:
        model = Invalidation
        fields = [
            "id",
            "kind",
            "document_id",
            "principal",
            "chunks_affected",
            "details",
            "actor",
            "created_at",
        ]


DOCUMENT_LIST = inline_serializer(
    "DocumentList",
    {
        "results": DocumentOutputSerializer(many=True),
        "next": inline_serializer(
            "DocumentsCursor", {"after_document_id": serializers.CharField()}, allow_null=True
        ),
    },
)
INDEXED = inline_serializer(
    "Indexed",
    {
        "changed": serializers.BooleanField(),
        "chunks": serializers.IntegerField(),
        "invalidated": serializers.IntegerField(),
        "document": DocumentOutputSerializer(),
    },
)
SNAPSHOT = inline_serializer(
    "RetrievalSnapshot",
    {
        "retrieval_snapshot_id": StrictCharField(),
        "query_digest": StrictCharField(),
        "index_version": serializers.JSONField(),
        "acl_principal": StrictCharField(),
        "run_id": serializers.UUIDField(allow_null=True),
        "created_at": serializers.DateTimeField(),
        "hits": serializers.ListField(child=serializers.DictField()),
    },
)


def _content(data: dict[str, Any], files: MultiValueDict[str, UploadedFile]) -> tuple[bytes, str]:
    upload = files.get("file")
    given = [name for name in ("text", "content_base64") if data.get(name) is not None]
    if (upload is not None) + len(given) != 1:
        raise InvalidInput(
            "send the content exactly once: a `file` upload, `text`, or `content_base64`",
            code="invalid_document_content",
        )
    if upload is not None:
        return upload.read(), media_type_guess(
            filename=upload.name or "", declared=data.get("media_type") or ""
        )
    if given == ["text"]:
        return str(data["text"]).encode("utf-8", "surrogatepass"), data.get("media_type") or "text/plain"
    try:
        raw = base64.b64decode(str(data["content_base64"]), validate=True)
    except (binascii.Error, ValueError):
        raise InvalidInput("content_base64 is not valid base64", code="invalid_document_content") from None
    return raw, data.get("media_type") or ""


class DocumentsApi(APIView):
    session_roles = (ENGINEER,)  # a staff session's change needs the console's role for it
    parser_classes = [JSONParser, MultiPartParser, FormParser]

    class InputSerializer(ClosedSerializer):
        read_by_view = ("file",)  # a multipart upload's file (_content)
        tenant = StrictCharField(
            max_length=64, required=False, allow_blank=True
        )  # with an API key: the key's
        document_id = StrictCharField(max_length=200)
        source_uri = StrictCharField(max_length=2000)
        source_version = StrictCharField(max_length=200)
        media_type = serializers.ChoiceField(choices=MEDIA_TYPES, required=False)
        title = StrictCharField(max_length=500, required=False, default="")
        acl = serializers.ListField(child=StrictCharField(max_length=210), max_length=1000)
        text = StrictCharField(required=False, trim_whitespace=False, allow_blank=True, allow_null=True)
        content_base64 = StrictCharField(required=False, allow_null=True)
        # A multipart upload's fields are all text ("true"); a JSON body's flag is true or false.
        wait = StrictBooleanField(required=False, default=False, form_text=True)

    class FilterSerializer(QuerySerializer):
        tenant = StrictCharField(
            max_length=64, required=False, allow_blank=True
        )  # with an API key: the key's
        after_document_id = StrictCharField(max_length=200, required=False)
        limit = serializers.IntegerField(min_value=1, max_value=500, default=200)

    @extend_schema(
        summary="Index a document (JSON with text or content_base64, or a multipart file)",
        request={"application/json": InputSerializer, "multipart/form-data": InputSerializer},
        responses={201: INDEXED, 200: INDEXED, **error_responses(409, 413, 415, 422)},
        examples=[
            OpenApiExample(
                "text",
                value={
                    "tenant": "acme",
                    "document_id": "policy-42",
                    "source_uri": "https://wiki/refunds",
                    "source_version": "etag:1",
                    "media_type": "text/markdown",
                    "acl": ["group:support"],
                    "text": "# Refunds\nWithin 14 days.",
                },
                request_only=True,
            )
        ],
    )
    def post(self, request: Request) -> Response:
        data = self.InputSerializer(data=request.data, context={"request": request})
        data.is_valid(raise_exception=True)
        fields = data.validated_data
        content, media_type = _content(fields, request.FILES)
        result = document_index(
            tenant=request_tenant(request, fields.get("tenant")),
            document_id=fields["document_id"],
            source_uri=fields["source_uri"],
            source_version=fields["source_version"],
            data=content,
            media_type=media_type,
            acl=fields["acl"],
            title=fields["title"],
            actor=request_actor(request),
            wait=fields["wait"],
        )
        with tenant_scope(result.document.tenant_id):
            body = {
                "changed": result.changed,
                "chunks": result.chunks,
                "invalidated": result.invalidated,
                "document": DocumentOutputSerializer(result.document).data,
            }
        return Response(body, status=201 if result.changed else 200)

    @extend_schema(
        summary="List documents",
        parameters=[FilterSerializer],
        responses={200: DOCUMENT_LIST, **error_responses()},
    )
    def get(self, request: Request) -> Response:
        f = self.FilterSerializer(data=request.query_params)
        f.is_valid(raise_exception=True)
        tenant = request_tenant(request, f.validated_data.get("tenant"))
        page = documents_page(
            tenant=tenant, after=f.validated_data.get("after_document_id"), limit=f.validated_data["limit"]
        )
        with tenant_scope(tenant.tenant_id):
            return Response(
                {
                    "results": DocumentOutputSerializer(page.rows, many=True).data,
                    "next": {"after_document_id": page.next_cursor[0]} if page.next_cursor else None,
                }
            )


class DocumentDetailApi(APIView):
    session_roles = (ENGINEER,)  # a staff session's change needs the console's role for it

    @extend_schema(
        summary="Read a document",
        parameters=[TenantParameterSerializer],
        responses={200: DocumentOutputSerializer, **error_responses()},
    )
    def get(self, request: Request, document_id: str) -> Response:
        tenant = request_tenant(request, request.query_params.get("tenant", ""))
        document = document_get(tenant=tenant, document_id=document_id)
        with tenant_scope(tenant.tenant_id):
            return Response(DocumentOutputSerializer(document).data)

    @extend_schema(
        summary="Delete a document and its chunks",
        parameters=[TenantParameterSerializer],
        responses={
            200: inline_serializer(
                "DocumentDeleted",
                {"document_id": StrictCharField(), "chunks_deleted": serializers.IntegerField()},
            ),
            **error_responses(409),
        },
    )
    def delete(self, request: Request, document_id: str) -> Response:
        tenant = request_tenant(request, request.query_params.get("tenant", ""))
        deleted = document_delete(tenant=tenant, document_id=document_id, actor=request_actor(request))
        return Response({"document_id": document_id, "chunks_deleted": deleted})


class DocumentAclApi(APIView):
    session_roles = (ENGINEER,)  # a staff session's change needs the console's role for it

    class InputSerializer(ClosedSerializer):
        tenant = StrictCharField(
            max_length=64, required=False, allow_blank=True
        )  # with an API key: the key's
        acl = serializers.ListField(child=StrictCharField(max_length=210), max_length=1000)

    @extend_schema(
        summary="Replace a document's ACL",
        request=InputSerializer,
        responses={200: DocumentOutputSerializer, **error_responses(409, 422)},
        examples=[
            OpenApiExample(
                "acl", value={"tenant": "acme", "acl": ["group:support", "user:sam"]}, request_only=True
            )
        ],
    )
    def put(self, request: Request, document_id: str) -> Response:
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        tenant = request_tenant(request, data.validated_data.get("tenant"))
        document = document_acl_set(
            tenant=tenant,
            document_id=document_id,
            acl=data.validated_data["acl"],
            actor=request_actor(request),
        )
        with tenant_scope(tenant.tenant_id):
            return Response(DocumentOutputSerializer(document).data)


PRINCIPAL = inline_serializer(
    "Principal",
    {"principal": StrictCharField(), "groups": serializers.ListField(child=StrictCharField())},
)


class PrincipalsApi(APIView):
    session_roles = (ENGINEER,)  # a staff session's change needs the console's role for it

    class InputSerializer(ClosedSerializer):
        tenant = StrictCharField(
            max_length=64, required=False, allow_blank=True
        )  # with an API key: the key's
        principal = StrictCharField(max_length=210)
        groups = serializers.ListField(child=StrictCharField(max_length=210), max_length=1000, default=list)

    @extend_schema(
        summary="Set a principal's groups",
        request=InputSerializer,
        responses={200: PRINCIPAL, **error_responses(409, 422)},
        examples=[
            OpenApiExample(
                "principal",
                value={"tenant": "acme", "principal": "user:sam", "groups": ["group:support"]},
                request_only=True,
            )
        ],
    )
    def post(self, request: Request) -> Response:
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        fields = data.validated_data
        row = principal_set(
            tenant=request_tenant(request, fields.get("tenant")),
            principal=fields["principal"],
            groups=fields["groups"],
            actor=request_actor(request),
        )
        return Response({"principal": row.principal, "groups": row.groups})


class PrincipalDetailApi(APIView):
    session_roles = (ENGINEER,)  # a staff session's change needs the console's role for it

    @extend_schema(
        summary="Remove a principal",
        parameters=[TenantParameterSerializer],
        responses={204: None, **error_responses(409, 422)},
    )
    def delete(self, request: Request, principal: str) -> Response:
        tenant = request_tenant(request, request.query_params.get("tenant", ""))
        principal_remove(tenant=tenant, principal=principal, actor=request_actor(request))
        return Response(status=204)


class SearchApi(APIView):
    class InputSerializer(ClosedSerializer):
        tenant = StrictCharField(
            max_length=64, required=False, allow_blank=True
        )  # with an API key: the key's
        principal = StrictCharField(max_length=210)
        query = StrictCharField(max_length=4000)
        k = StrictIntegerField(min_value=1, max_value=100, default=10)
        run_id = serializers.UUIDField(required=False, allow_null=True, default=None)

    @extend_schema(
        summary="Search as a principal (the hits are recorded in a snapshot)",
        request=InputSerializer,
        responses={200: SNAPSHOT, **error_responses(422)},
        examples=[
            OpenApiExample(
                "search",
                value={"tenant": "acme", "principal": "user:sam", "query": "refund window", "k": 5},
                request_only=True,
            )
        ],
    )
    def post(self, request: Request) -> Response:
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        fields = data.validated_data
        if fields["run_id"] is not None:
            request_run_tenant(request, fields["run_id"])
        result = retrieval_search(
            tenant=request_tenant(request, fields.get("tenant")),
            query=fields["query"],
            principal=fields["principal"],
            k=fields["k"],
            run_id=fields["run_id"],
        )
        return Response(
            _snapshot_body(result.snapshot, [{**h.provenance(), "text": h.text} for h in result.hits])
        )


def _snapshot_body(snapshot: RetrievalSnapshot, hits: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "retrieval_snapshot_id": snapshot.snapshot_id,
        "query_digest": snapshot.query_digest,
        "index_version": snapshot.index_version,
        "acl_principal": snapshot.acl_principal,
        "run_id": snapshot.run_id,
        "created_at": snapshot.created_at,
        "hits": hits,
    }


class SnapshotDetailApi(APIView):
    @extend_schema(
        summary="A retrieval snapshot with its recorded hits",
        parameters=[TenantParameterSerializer],
        responses={200: SNAPSHOT, **error_responses()},
    )
    def get(self, request: Request, snapshot_id: str) -> Response:
        tenant = request_tenant(request, request.query_params.get("tenant", ""))
        snapshot = snapshot_get(tenant=tenant, snapshot_id=snapshot_id)
        return Response(_snapshot_body(snapshot, snapshot.hits))


class SnapshotReplayApi(APIView):
    @extend_schema(
        summary="Replay a snapshot: its hits as the index holds them now",
        parameters=[TenantParameterSerializer],
        responses={200: SNAPSHOT, **error_responses(409)},
    )
    def get(self, request: Request, snapshot_id: str) -> Response:
        tenant = request_tenant(request, request.query_params.get("tenant", ""))
        snapshot = snapshot_get(tenant=tenant, snapshot_id=snapshot_id)
        hits = snapshot_replay(tenant=tenant, snapshot=snapshot)
        return Response(_snapshot_body(snapshot, [{**h.provenance(), "text": h.text} for h in hits]))


class InvalidationsApi(APIView):
    class FilterSerializer(QuerySerializer):
        tenant = StrictCharField(max_length=64, required=False, allow_blank=True)
        before_id = serializers.IntegerField(min_value=1, max_value=2**63 - 1, required=False)
        limit = serializers.IntegerField(min_value=1, max_value=500, default=200)

    @extend_schema(
        summary="What changed in the index (for replays and caches), newest first in keyset pages",
        parameters=[FilterSerializer],
        responses={
            200: inline_serializer(
                "InvalidationList",
                {
                    "results": InvalidationOutputSerializer(many=True),
                    "next": inline_serializer(
                        "InvalidationsCursor", {"before_id": serializers.IntegerField()}, allow_null=True
                    ),
                },
            ),
            **error_responses(),
        },
    )
    def get(self, request: Request) -> Response:
        f = self.FilterSerializer(data=request.query_params)
        f.is_valid(raise_exception=True)
        tenant = request_tenant(request, f.validated_data.get("tenant", ""))
        page = invalidations_page(
            tenant=tenant, before=f.validated_data.get("before_id"), limit=f.validated_data["limit"]
        )
        return Response(
            {
                "results": InvalidationOutputSerializer(page.rows, many=True).data,
                "next": {"before_id": page.next_cursor[0]} if page.next_cursor else None,
            }
        )
