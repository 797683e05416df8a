"""REST API for runs: start (idempotent), read, read events, cancel, resume. One view per action."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from drf_spectacular.utils import OpenApiExample, extend_schema, extend_schema_field, inline_serializer
from rest_framework import exceptions, serializers
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
from core.api_auth import request_actor, request_key, request_run_tenant, request_tenant
from core.pagination import CursorInvalid
from core.roles import ENGINEER, SUPPORT, user_roles
from runs.engine.forks import run_fork_once, run_rewind
from runs.engine.resume import run_state_accept
from runs.engine.runs import client_idempotency_key, run_cancel, run_resume, run_start
from runs.engine.selectors import (
    RUN_ORDERS,
    child_list,
    run_cursor_decode,
    run_cursor_encode,
    run_events,
    run_get,
    run_page,
)
from runs.kernel.models import AgentEvent, AgentRun, RunStatus


class RunOutputSerializer(serializers.ModelSerializer):
    tenant = StrictCharField(source="tenant.slug")

    class Meta:
        model = AgentRun
        fields = [
            "run_id",
            "tenant",
            "workflow_name",
            "workflow_version",
            "state_schema_version",
            "status",
            "next_step",
            "state",
            "state_revision",
            "suspend_reason",
            "suspend_detail",
            "resume_requested_at",
            "result",
            "lease_owner",
            "lease_expires_at",
            "lease_epoch",
            "attempt",
            "idempotency_key",
            "subject",
            "parent_run_id",
            "fork_seq",
            "child_of",
            "created_at",
            "updated_at",
        ]


class EventOutputSerializer(serializers.ModelSerializer):
    class Meta:
        model = AgentEvent
        fields = [
            "seq",
            "event_type",
            "step_id",
            "attempt",
            "payload",
            "actor",
            "state_revision",
            "state_digest",
            "created_at",
        ]


def run_for_request(request: Request, run_id: UUID) -> AgentRun:
    """The run, if this request may see it; a run of another tenant does not exist for an API key."""
    request_run_tenant(request, run_id)
    return run_get(run_id=run_id)


EVENTS_PAGE = inline_serializer(
    "EventsPage",
    {
        "results": EventOutputSerializer(many=True),
        "next_after_seq": serializers.IntegerField(allow_null=True),
    },
)


class RunListItemSerializer(RunOutputSerializer):
    class Meta(RunOutputSerializer.Meta):
        fields = [f for f in RunOutputSerializer.Meta.fields if f not in ("state", "result")]


RUNS_PAGE = inline_serializer(
    "RunsPage",
    {
        "results": RunListItemSerializer(many=True),
        "next": inline_serializer(
            "RunsCursor",
            {
                "order": serializers.CharField(),
                "cursor": serializers.CharField(),
                "before_updated_at": serializers.DateTimeField(required=False),
                "before_created_at": serializers.DateTimeField(required=False),
                "before_run_id": serializers.UUIDField(required=False),
            },
            allow_null=True,
        ),
    },
)


class RunStartApi(APIView):
    session_roles = (SUPPORT, ENGINEER)  # a staff session's change needs the console's role for it

    class FilterSerializer(QuerySerializer):
        tenant = StrictCharField(max_length=64, required=False, allow_blank=True)
        status = serializers.ChoiceField(choices=RunStatus.choices, required=False)
        workflow = StrictCharField(max_length=200, required=False)
        subject = StrictCharField(max_length=200, trim_whitespace=False, required=False)
        idempotency_key = StrictCharField(max_length=200, required=False)
        order = serializers.ChoiceField(
            choices=[*RUN_ORDERS, "created"],
            default="updated",
            help_text="updated: newest activity first (a run that changes while you page can move ahead "
            "of the cursor); created (or started): newest first by creation, for a walk that sees every "
            "run once; workflow, status, tenant (its slug), subject: A to Z; each with _asc or _desc "
            "for the other direction (updated_asc, workflow_desc...). Ties go by run_id; by status, by "
            "start and then run_id",
        )
        cursor = StrictCharField(
            max_length=2000, required=False, help_text="`next.cursor` of the page before, in this order"
        )
        before_updated_at = serializers.DateTimeField(required=False)
        before_created_at = serializers.DateTimeField(required=False)
        before_run_id = serializers.UUIDField(required=False)
        limit = serializers.IntegerField(min_value=1, max_value=200, default=50)

        def validate(self, data: dict[str, Any]) -> dict[str, Any]:
            order = data["order"] = "started" if data["order"] == "created" else data["order"]
            key = {"updated": "before_updated_at", "started": "before_created_at"}.get(order)
            for other in ("before_updated_at", "before_created_at"):
                if other in data and other != key:
                    raise serializers.ValidationError(
                        f"{other} is the cursor of order={other[7:-3]}, not of this order (pass `cursor`)"
                    )
            if key is not None and (key in data) != ("before_run_id" in data):
                raise serializers.ValidationError(f"{key} and before_run_id come together (the cursor)")
            if "before_run_id" in data and key not in data:
                raise serializers.ValidationError(
                    "before_run_id needs before_updated_at or before_created_at"
                )
            pair = (data[key], data["before_run_id"]) if key in data else None
            data["after"] = pair
            if "cursor" in data:
                try:
                    data["after"] = run_cursor_decode(order=order, token=data["cursor"])
                except CursorInvalid as exc:
                    raise serializers.ValidationError({"cursor": str(exc)}) from exc
                # `next` holds both for these orders; passed back together they must name one row.
                if pair is not None and pair != data["after"]:
                    raise serializers.ValidationError("`cursor` and the before_ pair name different rows")
            return data

    class InputSerializer(ClosedSerializer):
        tenant = StrictCharField(
            max_length=64, required=False, allow_blank=True
        )  # with an API key: the key's
        workflow = StrictCharField(max_length=200)
        workflow_version = StrictCharField(max_length=50, required=False)
        input = serializers.JSONField()
        subject = StrictCharField(max_length=200, trim_whitespace=False, required=False, default="")

    @extend_schema(
        summary="Start a run (idempotent with an Idempotency-Key header)",
        request=InputSerializer,
        responses={201: RunOutputSerializer, 200: RunOutputSerializer, **error_responses(409, 422)},
        examples=[
            OpenApiExample(
                "countdown",
                value={"tenant": "acme", "workflow": "demo.countdown", "input": {"n": 3}},
                request_only=True,
            )
        ],
    )
    def post(self, request: Request) -> Response:
        data: dict[str, Any] = self._validated(request)
        started = run_start(
            tenant=request_tenant(request, data.get("tenant")),
            workflow_name=data["workflow"],
            workflow_version=data.get("workflow_version"),
            input=data["input"],
            actor=request_actor(request),
            idempotency_key=client_idempotency_key(request.headers.get("Idempotency-Key")),
            subject=data.get("subject", ""),
        )
        return Response(RunOutputSerializer(started.run).data, status=201 if started.created else 200)

    @extend_schema(
        summary="List runs, newest activity first or (order=created) by creation (keyset pages: pass "
        "`next` back as the cursor); a key "
        "lists its tenant's, a staff session every tenant's unless it names `tenant`",
        parameters=[FilterSerializer],
        responses={200: RUNS_PAGE, **error_responses(400)},
    )
    def get(self, request: Request) -> Response:
        filters = self.FilterSerializer(data=request.query_params)
        filters.is_valid(raise_exception=True)
        data = dict(filters.validated_data)
        given = data.pop("tenant", None) or None
        # A key lists its own tenant's runs; a staff session every tenant's, or the one it names
        # (as the approvals list does).
        tenant = request_tenant(request, given) if given or request_key(request) is not None else None
        order = data["order"]
        page = run_page(
            tenant=tenant,
            cursor=data["after"],
            limit=data["limit"],
            order=order,
            **{name: data.get(name) for name in ("status", "workflow", "subject", "idempotency_key")},
        )
        after = page.next_cursor
        following: dict[str, Any] | None = None
        if after is not None:
            following = {"order": order, "cursor": run_cursor_encode(order=order, cursor=after)}
            # The pair of the first two orders, as clients written before `cursor` pass it back.
            if key := {"updated": "before_updated_at", "started": "before_created_at"}.get(order):
                following |= {key: after[0], "before_run_id": after[1]}
        return Response({"results": RunListItemSerializer(page.rows, many=True).data, "next": following})

    def _validated(self, request: Request) -> dict[str, Any]:
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        return dict(serializer.validated_data)


class ChildLinkSerializer(serializers.ModelSerializer):
    class Meta:
        model = AgentRun
        fields = ["run_id", "workflow_name", "status"]


class RunDetailSerializer(RunOutputSerializer):
    """A run with its child runs (ctx.start_child; the newest 50); `child_of` names its parent."""

    children = serializers.SerializerMethodField()

    class Meta(RunOutputSerializer.Meta):
        fields = [*RunOutputSerializer.Meta.fields, "children"]

    @extend_schema_field(ChildLinkSerializer(many=True))
    def get_children(self, run: AgentRun) -> list[dict[str, Any]]:
        return list(ChildLinkSerializer(child_list(run=run, limit=50), many=True).data)


class RunDetailApi(APIView):
    @extend_schema(summary="Read a run", responses={200: RunDetailSerializer, **error_responses()})
    def get(self, request: Request, run_id: UUID) -> Response:
        return Response(RunDetailSerializer(run_for_request(request, run_id)).data)


class RunEventsApi(APIView):
    class FilterSerializer(QuerySerializer):
        after_seq = serializers.IntegerField(min_value=0, default=0)
        limit = serializers.IntegerField(min_value=1, max_value=1000, default=100)

    @extend_schema(
        summary="Read a run's events",
        parameters=[FilterSerializer],
        responses={200: EVENTS_PAGE, **error_responses()},
    )
    def get(self, request: Request, run_id: UUID) -> Response:
        filters = self.FilterSerializer(data=request.query_params)
        filters.is_valid(raise_exception=True)
        run_for_request(request, run_id)
        events = run_events(run_id=run_id, **filters.validated_data)
        return Response(
            {
                "results": EventOutputSerializer(events, many=True).data,
                "next_after_seq": events[-1].seq if events else None,
            }
        )


class NoteInputSerializer(ClosedSerializer):
    note = StrictCharField(max_length=2000, required=False, allow_blank=True, default="")


class RunCancelApi(APIView):
    session_roles = (SUPPORT, ENGINEER)  # a staff session's change needs the console's role for it

    @extend_schema(
        summary="Cancel a run",
        request=NoteInputSerializer,
        responses={200: RunOutputSerializer, **error_responses(409, 422)},
        examples=[OpenApiExample("note", value={"note": "duplicate request"}, request_only=True)],
    )
    def post(self, request: Request, run_id: UUID) -> Response:
        data = NoteInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        run_for_request(request, run_id)
        run = run_cancel(run_id=run_id, actor=request_actor(request), note=data.validated_data["note"])
        return Response(RunOutputSerializer(run).data)


class RunResumeApi(APIView):
    session_roles = (SUPPORT, ENGINEER)  # a staff session's change needs the console's role for it

    @extend_schema(
        summary="Ask for a suspended run to resume (a worker verifies it)",
        request=NoteInputSerializer,
        responses={200: RunOutputSerializer, **error_responses(409, 422)},
        examples=[OpenApiExample("note", value={"note": "stock arrived"}, request_only=True)],
    )
    def post(self, request: Request, run_id: UUID) -> Response:
        data = NoteInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        run_for_request(request, run_id)
        run = run_resume(run_id=run_id, actor=request_actor(request), note=data.validated_data["note"])
        return Response(RunOutputSerializer(run).data)


class RunForkApi(APIView):
    session_roles = (ENGINEER,)  # a staff session's change needs the console's role for it

    class InputSerializer(ClosedSerializer):
        at_seq = StrictIntegerField(min_value=1)
        start = StrictBooleanField(required=False, default=True)
        note = StrictCharField(max_length=2000, required=False, allow_blank=True, default="")

    @extend_schema(
        summary="Fork a run at an event (idempotent with an Idempotency-Key header)",
        request=InputSerializer,
        responses={201: RunOutputSerializer, 200: RunOutputSerializer, **error_responses(409, 422)},
        examples=[OpenApiExample("fork", value={"at_seq": 3, "note": "try again"}, request_only=True)],
    )
    def post(self, request: Request, run_id: UUID) -> Response:
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        run_for_request(request, run_id)
        fork = run_fork_once(
            run_id=run_id,
            actor=request_actor(request),
            idempotency_key=request.headers.get("Idempotency-Key"),
            **data.validated_data,
        )
        return Response(RunOutputSerializer(fork.run).data, status=201 if fork.created else 200)


class RunRewindApi(APIView):
    session_roles = (ENGINEER,)  # a staff session's change needs the console's role for it

    class InputSerializer(ClosedSerializer):
        to_seq = StrictIntegerField(min_value=1)
        note = StrictCharField(max_length=2000, required=False, allow_blank=True, default="")

    @extend_schema(
        summary="Rewind a run to an event (as a new run; idempotent with an Idempotency-Key header)",
        request=InputSerializer,
        responses={201: RunOutputSerializer, 200: RunOutputSerializer, **error_responses(409, 422)},
        examples=[OpenApiExample("rewind", value={"to_seq": 2}, request_only=True)],
    )
    def post(self, request: Request, run_id: UUID) -> Response:
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        run_for_request(request, run_id)
        rewound = run_rewind(
            run_id=run_id,
            actor=request_actor(request),
            idempotency_key=request.headers.get("Idempotency-Key"),
            **data.validated_data,
        )
        return Response(RunOutputSerializer(rewound.run).data, status=201 if rewound.created else 200)


ACCEPTED_STATE = inline_serializer(
    "AcceptedState",
    {
        "run": RunOutputSerializer(),
        "refused_code": StrictCharField(),
        "digest_before": StrictCharField(),
        "digest_after": StrictCharField(),
    },
)


class RunAcceptStateApi(APIView):
    session_roles = (ENGINEER,)  # a staff session's change needs the console's role for it

    class InputSerializer(ClosedSerializer):
        note = StrictCharField(max_length=2000)
        state_digest = StrictCharField(max_length=200, required=False)

    @extend_schema(
        summary="Accept the changed state a resume was refused for (engineers; a note is required)",
        description="Only for a run suspended with `state_digest_mismatch` or `history_mismatch`. Records a "
        "`state_accepted` event with both digests; the run stays suspended until it is resumed. "
        "With `state_digest`, only that state is accepted (409 if the stored state is another).",
        request=InputSerializer,
        responses={200: ACCEPTED_STATE, **error_responses(400, 403, 409, 422)},
        examples=[OpenApiExample("accept", value={"note": "fixed by hand, ticket 4711"}, request_only=True)],
    )
    def post(self, request: Request, run_id: UUID) -> Response:
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        run_for_request(request, run_id)
        if request_key(request) is None and ENGINEER not in user_roles(request.user):
            raise exceptions.PermissionDenied("accepting a changed state needs the engineer role")
        change = run_state_accept(
            run_id=run_id,
            actor=request_actor(request),
            note=data.validated_data["note"],
            expected_digest=data.validated_data.get("state_digest"),
        )
        return Response(
            {
                "run": RunOutputSerializer(AgentRun.objects.get(run_id=run_id)).data,
                "refused_code": change.refused_code,
                "digest_before": change.committed_digest,
                "digest_after": change.current_digest,
            }
        )
