"""REST API for merging a branch back: merge a fork into its parent (or another run of its tree), read
a merge, resolve its conflicts, or abandon it. One view per action."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from drf_spectacular.utils import OpenApiExample, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api import ClosedSerializer, StrictCharField, error_responses
from core.api_auth import request_actor, request_run_tenant
from core.errors import NotFound
from core.roles import ENGINEER
from runs.engine.merge_rules import MergePick
from runs.engine.merges import merge_abandon, merge_get, merge_resolve, run_merge
from runs.engine.workspace_models import WorkspaceMerge


class MergeConflictSerializer(serializers.Serializer[dict[str, Any]]):
    id = serializers.CharField()
    path = serializers.CharField()
    kind = serializers.ChoiceField(choices=["text", "binary", "deleted"])
    base = serializers.CharField(allow_null=True)
    ours = serializers.CharField(allow_null=True)
    theirs = serializers.CharField(allow_null=True)


class MergeOutputSerializer(serializers.ModelSerializer[WorkspaceMerge]):
    source_run_id = serializers.UUIDField(source="source_id")
    target_run_id = serializers.UUIDField(source="target_id")
    conflicts = MergeConflictSerializer(many=True)
    state = serializers.SerializerMethodField()

    class Meta:
        model = WorkspaceMerge
        fields = [
            "merge_id",
            "source_run_id",
            "target_run_id",
            "base_run_id",
            "base_seq",
            "source_seq",
            "target_seq",
            "status",
            "conflicts",
            "taken",
            "state",
            "result_seq",
            "actor",
            "resolved_by",
            "created_at",
            "applied_at",
        ]

    def get_state(self, merge: WorkspaceMerge) -> dict[str, Any]:
        """How the state merged (the keys taken from the branch, or the declared rule), not its values."""
        return {k: v for k, v in merge.state_taken.items() if k != "state"}


def _merge_of_run(request: Request, run_id: UUID, merge_id: UUID) -> WorkspaceMerge:
    request_run_tenant(request, run_id)
    merge = merge_get(merge_id=merge_id)
    if run_id not in (merge.target_id, merge.source_id):
        raise NotFound(f"no merge {merge_id} of run {run_id}", code="merge_not_found")
    return merge


class RunMergeApi(APIView):
    session_roles = (ENGINEER,)  # a staff session's change needs the console's role for it

    class InputSerializer(ClosedSerializer):
        into = serializers.UUIDField(required=False, allow_null=True, default=None)

    @extend_schema(
        summary="Merge this run (a fork) into its parent or another run of its tree",
        description=(
            "Three-way merge of the workspace's files against the common fork point, and of the state "
            "by the workflow's rule (default: refuse keys both changed, 409 state_merge_refused). "
            "201 with status `applied`, or `conflicts` to resolve (a running target waits, suspended "
            "merge_conflicts). Operations stay with the run that made them: nothing is sent again."
        ),
        request=InputSerializer,
        responses={201: MergeOutputSerializer, **error_responses(409, 422)},
        examples=[OpenApiExample("into the parent", value={}, request_only=True)],
    )
    def post(self, request: Request, run_id: UUID) -> Response:
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        request_run_tenant(request, run_id)
        into = data.validated_data["into"]
        if into is not None:
            request_run_tenant(request, into)
        merge = run_merge(run_id=run_id, into_run_id=into, actor=request_actor(request))
        return Response(MergeOutputSerializer(merge).data, status=201)


class RunMergeDetailApi(APIView):
    @extend_schema(
        summary="A merge of this run (as its source or target)",
        responses={200: MergeOutputSerializer, **error_responses()},
    )
    def get(self, request: Request, run_id: UUID, merge_id: UUID) -> Response:
        return Response(MergeOutputSerializer(_merge_of_run(request, run_id, merge_id)).data)


class PickSerializer(ClosedSerializer):
    id = StrictCharField(max_length=1200)
    take = serializers.ChoiceField(choices=["ours", "theirs", "edited"])
    text = StrictCharField(
        max_length=1_000_000, required=False, allow_blank=True, default="", trim_whitespace=False
    )


class RunMergeResolveApi(APIView):
    session_roles = (ENGINEER,)  # a staff session's change needs the console's role for it

    class InputSerializer(ClosedSerializer):
        picks = PickSerializer(many=True, allow_empty=False)

    @extend_schema(
        summary="Resolve a merge's conflicts: a side or edited text for each; the merge applies",
        request=InputSerializer,
        responses={200: MergeOutputSerializer, **error_responses(409, 422)},
        examples=[
            OpenApiExample(
                "one conflict",
                value={"picks": [{"id": "notes.md#0", "take": "edited", "text": "both ideas\n"}]},
                request_only=True,
            )
        ],
    )
    def post(self, request: Request, run_id: UUID, merge_id: UUID) -> Response:
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        merge = _merge_of_run(request, run_id, merge_id)
        picks = {p["id"]: MergePick(p["take"], p["text"]) for p in data.validated_data["picks"]}
        if len(picks) != len(data.validated_data["picks"]):
            raise serializers.ValidationError({"picks": ["each conflict once"]})
        merged = merge_resolve(
            tenant_id=merge.tenant_id, merge_id=merge.merge_id, picks=picks, actor=request_actor(request)
        )
        return Response(MergeOutputSerializer(merged).data)


class RunMergeAbandonApi(APIView):
    session_roles = (ENGINEER,)  # a staff session's change needs the console's role for it

    @extend_schema(
        summary="Abandon a merge whose conflicts are open (a target that waited for it resumes)",
        request=None,
        responses={200: MergeOutputSerializer, **error_responses(409)},
    )
    def post(self, request: Request, run_id: UUID, merge_id: UUID) -> Response:
        merge = _merge_of_run(request, run_id, merge_id)
        gone = merge_abandon(tenant_id=merge.tenant_id, merge_id=merge.merge_id, actor=request_actor(request))
        return Response(MergeOutputSerializer(gone).data)
