"""REST API for long-term memory and erasure requests. One view per action; the tenant is explicit."""

from __future__ import annotations

from uuid import UUID

from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from core.errors import NotFound
from core.tenancy import tenant_get, tenant_scope
from memory.erasure import erasure_request_create
from memory.models import ErasureRequest, MemoryItem
from memory.projection import memory_search
from memory.selectors import memory_recall
from memory.services import memory_invalidate, memory_remember, memory_supersede


class MemoryItemOutputSerializer(serializers.ModelSerializer):
    class Meta:
        model = MemoryItem
        fields = ["memory_id", "subject_id", "namespace", "key", "value", "schema_version", "provenance", "confidence",
                  "valid_from", "expires_at", "invalidated_at", "invalidation_reason", "supersedes", "consent_basis",
                  "created_at"]  # fmt: skip


class ErasureOutputSerializer(serializers.ModelSerializer):
    class Meta:
        model = ErasureRequest
        fields = ["request_id", "subject_digest", "requested_by", "status", "progress", "receipt", "error",
                  "created_at", "completed_at"]  # fmt: skip


def _actor(request: Request) -> str:
    return f"user:{request.user.get_username()}"


class MemoryItemsApi(APIView):
    class InputSerializer(serializers.Serializer):
        tenant = serializers.CharField(max_length=64)
        subject_id = serializers.CharField(max_length=200)
        namespace = serializers.CharField(max_length=200)
        key = serializers.CharField(max_length=200)
        value = serializers.JSONField()
        provenance = serializers.DictField()
        confidence = serializers.FloatField(required=False, allow_null=True, default=None)
        consent_basis = serializers.CharField(max_length=200, required=False, allow_null=True, default=None)

    class FilterSerializer(serializers.Serializer):
        tenant = serializers.CharField(max_length=64)
        subject_id = serializers.CharField(max_length=200)
        namespace = serializers.CharField(max_length=200, required=False)

    def post(self, request: Request) -> Response:
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        fields = dict(data.validated_data)
        item = memory_remember(tenant=tenant_get(slug_or_id=fields.pop("tenant")), **fields)
        return Response(MemoryItemOutputSerializer(item).data, status=201)

    def get(self, request: Request) -> Response:
        f = self.FilterSerializer(data=request.query_params)
        f.is_valid(raise_exception=True)
        namespace = f.validated_data.get("namespace")
        items = memory_recall(tenant=tenant_get(slug_or_id=f.validated_data["tenant"]),
                              subject_id=f.validated_data["subject_id"], namespaces=[namespace] if namespace else None)  # fmt: skip
        return Response({"results": MemoryItemOutputSerializer(items, many=True).data})


class MemoryItemSupersedeApi(APIView):
    class InputSerializer(serializers.Serializer):
        tenant = serializers.CharField(max_length=64)
        value = serializers.JSONField()
        provenance = serializers.DictField()
        confidence = serializers.FloatField(required=False, allow_null=True, default=None)

    def post(self, request: Request, memory_id: UUID) -> Response:
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        fields = dict(data.validated_data)
        item = memory_supersede(
            tenant=tenant_get(slug_or_id=fields.pop("tenant")), memory_id=memory_id, **fields
        )
        return Response(MemoryItemOutputSerializer(item).data, status=201)


class MemoryItemInvalidateApi(APIView):
    class InputSerializer(serializers.Serializer):
        tenant = serializers.CharField(max_length=64)
        reason = serializers.CharField(max_length=500)

    def post(self, request: Request, memory_id: UUID) -> Response:
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        item = memory_invalidate(tenant=tenant_get(slug_or_id=data.validated_data["tenant"]), memory_id=memory_id,
                                 reason=data.validated_data["reason"])  # fmt: skip
        return Response(MemoryItemOutputSerializer(item).data)


class MemorySearchApi(APIView):
    class FilterSerializer(serializers.Serializer):
        tenant = serializers.CharField(max_length=64)
        query = serializers.CharField(max_length=2000)
        subject_id = serializers.CharField(max_length=200, required=False)
        k = serializers.IntegerField(min_value=1, max_value=100, default=10)

    def get(self, request: Request) -> Response:
        f = self.FilterSerializer(data=request.query_params)
        f.is_valid(raise_exception=True)
        hits = memory_search(tenant=tenant_get(slug_or_id=f.validated_data["tenant"]), query=f.validated_data["query"],
                             subject_id=f.validated_data.get("subject_id"), k=f.validated_data["k"])  # fmt: skip
        return Response({"results": [{"score": h.score, "vector_rank": h.vector_rank, "text_rank": h.text_rank,
                                      "item": MemoryItemOutputSerializer(h.item).data} for h in hits]})  # fmt: skip


class ErasureRequestsApi(APIView):
    class InputSerializer(serializers.Serializer):
        tenant = serializers.CharField(max_length=64)
        subject_id = serializers.CharField(max_length=200)

    def post(self, request: Request) -> Response:
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        created = erasure_request_create(tenant=tenant_get(slug_or_id=data.validated_data["tenant"]),
                                         subject_id=data.validated_data["subject_id"], requested_by=_actor(request))  # fmt: skip
        return Response(ErasureOutputSerializer(created).data, status=202)


class ErasureRequestDetailApi(APIView):
    def get(self, request: Request, request_id: UUID) -> Response:
        tenant = tenant_get(slug_or_id=request.query_params.get("tenant", ""))
        with tenant_scope(tenant.tenant_id):
            found = ErasureRequest.objects.filter(request_id=request_id).first()
        if found is None:
            raise NotFound(
                f"no erasure request {request_id} for tenant {tenant.slug}", code="erasure_request_not_found"
            )
        return Response(ErasureOutputSerializer(found).data)
