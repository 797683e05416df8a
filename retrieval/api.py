"""REST API for retrieval: documents (index, ACL, delete), principals, search, snapshots and replay.

A document's content comes as a multipart file upload (`file`) or, in JSON, as `text` or
`content_base64`. The tenant is explicit on every call.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from rest_framework import serializers
from rest_framework.parsers import FormParser, JSONParser, MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from core.errors import InvalidInput
from core.tenancy import tenant_get, tenant_scope
from retrieval.models import Document, Invalidation, RetrievalSnapshot
from retrieval.search import retrieval_search, snapshot_get, snapshot_replay
from retrieval.selectors import document_get, documents_list, invalidations_list
from retrieval.services import (
    document_acl_set,
    document_delete,
    document_index,
    principal_remove,
    principal_set,
)
from retrieval.sources import MEDIA_TYPES, media_type_guess


class DocumentOutputSerializer(serializers.ModelSerializer):
    chunks = serializers.SerializerMethodField()

    class Meta:
        model = Document
        fields = ["document_id", "source_uri", "source_version", "source_digest", "media_type", "title", "acl",
                  "status", "index_version", "created_at", "updated_at", "indexed_at", "chunks"]  # fmt: skip

    def get_chunks(self, document: Document) -> dict[str, int]:
        counts: dict[str, int] = {}
        for status in document.chunks.values_list("status", flat=True):
            counts[status] = counts.get(status, 0) + 1
        return counts


class InvalidationOutputSerializer(serializers.ModelSerializer):
    document_id = serializers.CharField(source="document_id_text", allow_null=True)

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


def _actor(request: Request) -> str:
    return f"user:{request.user.get_username()}"


def _content(data: dict, files: dict) -> tuple[bytes, str]:  # type: ignore[type-arg]
    upload = files.get("file")
    given = [name for name in ("text", "content_base64") if data.get(name) is not None]
    if (upload is not None) + len(given) != 1:
        raise InvalidInput("send the content exactly once: a `file` upload, `text`, or `content_base64`",
                           code="invalid_document_content")  # fmt: skip
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
    parser_classes = [JSONParser, MultiPartParser, FormParser]

    class InputSerializer(serializers.Serializer):
        tenant = serializers.CharField(max_length=64)
        document_id = serializers.CharField(max_length=200)
        source_uri = serializers.CharField(max_length=2000)
        source_version = serializers.CharField(max_length=200)
        media_type = serializers.ChoiceField(choices=MEDIA_TYPES, required=False)
        title = serializers.CharField(max_length=500, required=False, default="")
        acl = serializers.ListField(child=serializers.CharField(max_length=210), max_length=1000)
        text = serializers.CharField(required=False, trim_whitespace=False, allow_blank=True, allow_null=True)
        content_base64 = serializers.CharField(required=False, allow_null=True)
        wait = serializers.BooleanField(required=False, default=False)

    class FilterSerializer(serializers.Serializer):
        tenant = serializers.CharField(max_length=64)

    def post(self, request: Request) -> Response:
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        fields = data.validated_data
        content, media_type = _content(fields, request.FILES)
        result = document_index(
            tenant=tenant_get(slug_or_id=fields["tenant"]), document_id=fields["document_id"],
            source_uri=fields["source_uri"], source_version=fields["source_version"], data=content,
            media_type=media_type, acl=fields["acl"], title=fields["title"], actor=_actor(request),
            wait=fields["wait"],
        )  # fmt: skip
        with tenant_scope(result.document.tenant_id):
            body = {"changed": result.changed, "chunks": result.chunks, "invalidated": result.invalidated,
                    "document": DocumentOutputSerializer(result.document).data}  # fmt: skip
        return Response(body, status=201 if result.changed else 200)

    def get(self, request: Request) -> Response:
        f = self.FilterSerializer(data=request.query_params)
        f.is_valid(raise_exception=True)
        tenant = tenant_get(slug_or_id=f.validated_data["tenant"])
        documents = documents_list(tenant=tenant)
        with tenant_scope(tenant.tenant_id):
            return Response({"results": DocumentOutputSerializer(documents, many=True).data})


class DocumentDetailApi(APIView):
    def get(self, request: Request, document_id: str) -> Response:
        tenant = tenant_get(slug_or_id=request.query_params.get("tenant", ""))
        document = document_get(tenant=tenant, document_id=document_id)
        with tenant_scope(tenant.tenant_id):
            return Response(DocumentOutputSerializer(document).data)

    def delete(self, request: Request, document_id: str) -> Response:
        tenant = tenant_get(slug_or_id=request.query_params.get("tenant", ""))
        deleted = document_delete(tenant=tenant, document_id=document_id, actor=_actor(request))
        return Response({"document_id": document_id, "chunks_deleted": deleted})


class DocumentAclApi(APIView):
    class InputSerializer(serializers.Serializer):
        tenant = serializers.CharField(max_length=64)
        acl = serializers.ListField(child=serializers.CharField(max_length=210), max_length=1000)

    def put(self, request: Request, document_id: str) -> Response:
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        tenant = tenant_get(slug_or_id=data.validated_data["tenant"])
        document = document_acl_set(tenant=tenant, document_id=document_id, acl=data.validated_data["acl"],
                                    actor=_actor(request))  # fmt: skip
        with tenant_scope(tenant.tenant_id):
            return Response(DocumentOutputSerializer(document).data)


class PrincipalsApi(APIView):
    class InputSerializer(serializers.Serializer):
        tenant = serializers.CharField(max_length=64)
        principal = serializers.CharField(max_length=210)
        groups = serializers.ListField(
            child=serializers.CharField(max_length=210), max_length=1000, default=list
        )

    def post(self, request: Request) -> Response:
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        fields = data.validated_data
        row = principal_set(tenant=tenant_get(slug_or_id=fields["tenant"]), principal=fields["principal"],
                            groups=fields["groups"], actor=_actor(request))  # fmt: skip
        return Response({"principal": row.principal, "groups": row.groups})


class PrincipalDetailApi(APIView):
    def delete(self, request: Request, principal: str) -> Response:
        tenant = tenant_get(slug_or_id=request.query_params.get("tenant", ""))
        principal_remove(tenant=tenant, principal=principal, actor=_actor(request))
        return Response(status=204)


class SearchApi(APIView):
    class InputSerializer(serializers.Serializer):
        tenant = serializers.CharField(max_length=64)
        principal = serializers.CharField(max_length=210)
        query = serializers.CharField(max_length=4000)
        k = serializers.IntegerField(min_value=1, max_value=100, default=10)
        run_id = serializers.UUIDField(required=False, allow_null=True, default=None)

    def post(self, request: Request) -> Response:
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        fields = data.validated_data
        result = retrieval_search(tenant=tenant_get(slug_or_id=fields["tenant"]), query=fields["query"],
                                  principal=fields["principal"], k=fields["k"], run_id=fields["run_id"])  # fmt: skip
        return Response(
            _snapshot_body(result.snapshot, [{**h.provenance(), "text": h.text} for h in result.hits])
        )


def _snapshot_body(snapshot: RetrievalSnapshot, hits: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "retrieval_snapshot_id": snapshot.snapshot_id, "query_digest": snapshot.query_digest,
        "index_version": snapshot.index_version, "acl_principal": snapshot.acl_principal,
        "run_id": snapshot.run_id, "created_at": snapshot.created_at, "hits": hits,
    }  # fmt: skip


class SnapshotDetailApi(APIView):
    def get(self, request: Request, snapshot_id: str) -> Response:
        tenant = tenant_get(slug_or_id=request.query_params.get("tenant", ""))
        snapshot = snapshot_get(tenant=tenant, snapshot_id=snapshot_id)
        return Response(_snapshot_body(snapshot, snapshot.hits))


class SnapshotReplayApi(APIView):
    def get(self, request: Request, snapshot_id: str) -> Response:
        tenant = tenant_get(slug_or_id=request.query_params.get("tenant", ""))
        snapshot = snapshot_get(tenant=tenant, snapshot_id=snapshot_id)
        hits = snapshot_replay(tenant=tenant, snapshot=snapshot)
        return Response(_snapshot_body(snapshot, [{**h.provenance(), "text": h.text} for h in hits]))


class InvalidationsApi(APIView):
    def get(self, request: Request) -> Response:
        tenant = tenant_get(slug_or_id=request.query_params.get("tenant", ""))
        rows = invalidations_list(tenant=tenant)
        return Response({"results": InvalidationOutputSerializer(rows, many=True).data})
