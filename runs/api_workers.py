"""REST API for outside workers: claim, commit, heartbeat, lookups and release (the worker protocol);
registering external workflows is in api_external_workflows.py, operations and approvals in
api_worker_operations.py."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from drf_spectacular.utils import OpenApiExample, OpenApiResponse, extend_schema, inline_serializer
from rest_framework import exceptions, serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api import (
    ClosedSerializer,
    StrictBooleanField,
    StrictCharField,
    StrictFloatField,
    StrictIntegerField,
    StrictRegexField,
    error_responses,
)
from core.api_auth import (
    WorkerProtocolThrottle,
    request_key,
    request_run_tenant,
    request_tenant,
)
from core.roles import ENGINEER
from runs.external import protocol, tokens
from runs.kernel.verify import Lookup

MAX_STEP_TOKENS = 10**12
MAX_STEP_COST_USD = 1e9
MAX_STEP_WALL_S = 1e7  # about 116 days


def key_tenant(request: Request) -> UUID:
    key = request_key(request)
    if key is None:
        raise exceptions.PermissionDenied(
            "outside workers authenticate with a tenant API key (Bearer kp_...)"
        )
    return request_tenant(request).tenant_id


def lease_of_request(request: Request, run_id: UUID, token: str) -> tokens.Lease:
    return tokens.lease_token_verify(token=token, tenant_id=key_tenant(request), run_id=run_id)


class WorkerRunApiView(APIView):
    """A worker call about one run: another tenant's run does not exist for the key (404
    run_not_found), whatever the body says, before the body or the lease token is read."""

    throttle_classes = [WorkerProtocolThrottle]

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        key_tenant(request)
        request_run_tenant(request, kwargs["run_id"])


# --- external workflows ---------------------------------------------------------------------------


OPERATION = inline_serializer(
    "WorkerOperation",
    {
        "operation_id": StrictCharField(),
        "idempotency_key": StrictCharField(),
        "status": StrictCharField(),
        "external_ref": StrictCharField(allow_null=True),
        "result": serializers.JSONField(allow_null=True),
        "attempts": serializers.IntegerField(),
    },
)

CLAIM = inline_serializer(
    "WorkerClaim",
    {
        "run_id": serializers.UUIDField(),
        "workflow": StrictCharField(),
        "workflow_version": StrictCharField(),
        "step": StrictCharField(),
        "state": serializers.JSONField(),
        "revision": serializers.IntegerField(),
        "attempt": serializers.IntegerField(),
        "lease_epoch": serializers.IntegerField(),
        "lease_expires_at": serializers.DateTimeField(),
        "lease_token": StrictCharField(),
        "verified": StrictCharField(allow_null=True),
        "lookups_needed": serializers.BooleanField(
            help_text="true: a take-over with operations in doubt that only your lookups can settle: answer "
            "POST .../lookups with what each finds before anything else; its answer is the claim to use"
        ),
        "operations_in_doubt": serializers.ListField(child=serializers.DictField()),
        "signals": serializers.ListField(child=serializers.DictField()),
    },
)


class WorkerClaimApi(APIView):
    session_roles = (ENGINEER,)  # a staff session's change needs the console's role for it
    throttle_classes = [WorkerProtocolThrottle]

    class InputSerializer(ClosedSerializer):
        workflows = serializers.ListField(child=StrictCharField(max_length=200), min_length=1, max_length=50)
        wait_seconds = StrictFloatField(min_value=0, max_value=protocol.MAX_WAIT_S, default=0)
        worker_id = StrictRegexField(
            r"^[A-Za-z0-9_.:-]{1,64}$",
            rule="1 to 64 letters, digits, '_', '.', ':' or '-'",
            required=False,
            default="worker",
        )
        lease_ttl = StrictFloatField(min_value=1, max_value=3600, required=False)

    @extend_schema(
        summary="Claim the next step of a run of your external workflows (long-poll up to wait_seconds)",
        description="200 with a lease (and `operations_in_doubt` to reconcile before anything else), or 204 "
        "when no run was ready before `wait_seconds` ran out. A run that was suspended or whose previous "
        "lease expired passes Keeper's resume verification first. A web process lets KEEPER_CLAIM_WAITERS "
        "claims wait at once; a claim past them looks once and, with nothing ready, answers 204 at once "
        "with `Retry-After` (seconds to wait before claiming again).",
        request=InputSerializer,
        responses={
            200: CLAIM,
            204: OpenApiResponse(description="no work (with Retry-After when the claim could not wait)"),
            **error_responses(),
        },
        examples=[
            OpenApiExample(
                "claim", value={"workflows": ["ext.refund"], "wait_seconds": 20}, request_only=True
            )
        ],
    )
    def post(self, request: Request) -> Response:
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        tenant_id = key_tenant(request)
        key = request_key(request)
        assert key is not None
        v = data.validated_data
        with protocol.claim_wait_slot(v["wait_seconds"]) as may_wait:
            claim = protocol.external_claim(
                tenant_id=tenant_id,
                workflows=v["workflows"],
                owner=protocol.worker_owner(key_prefix=key.prefix, worker_id=v["worker_id"]),
                wait_seconds=v["wait_seconds"] if may_wait else 0,
                ttl=v.get("lease_ttl"),
            )
        if claim is None:
            # Nothing ready; a claim that could not wait (this process's waiting claims are all taken)
            # is told when to come back instead of coming back at once.
            headers = {} if may_wait else {"Retry-After": str(protocol.retry_after(v["wait_seconds"]))}
            return Response(status=204, headers=headers)
        return Response(_claimed(claim))


def _claimed(claim: protocol.Claim) -> dict[str, Any]:
    g = claim.grant
    return {
        "run_id": g.run_id,
        "workflow": g.workflow_name,
        "workflow_version": g.workflow_version,
        "step": g.next_step,
        "state": claim.state,
        "revision": claim.revision,
        "attempt": g.attempt,
        "lease_epoch": g.epoch,
        "lease_expires_at": g.expires_at,
        "lease_token": claim.token,
        "verified": claim.verified,
        "lookups_needed": claim.lookups_needed,
        "operations_in_doubt": claim.operations_in_doubt,
        "signals": claim.signals,
    }


# --- under a lease --------------------------------------------------------------------------------


class LeaseInputSerializer(ClosedSerializer):
    lease_token = StrictCharField(max_length=2000)


class CommitOutputSerializer(serializers.Serializer):
    run_id = serializers.UUIDField()
    seq = serializers.IntegerField()
    revision = serializers.IntegerField()
    status = StrictCharField()
    next_step = StrictCharField(allow_null=True)
    event_type = StrictCharField()
    replayed = serializers.BooleanField(
        help_text="true: this exact commit was already written; this is its answer"
    )


class WorkerCommitApi(WorkerRunApiView):
    class SuspendSerializer(ClosedSerializer):
        reason = StrictRegexField(
            r"^[a-z][a-z0-9_]{0,63}$",
            rule="a lower-case letter, then up to 63 lower-case letters, digits or '_'",
        )
        detail = StrictCharField(max_length=2000, required=False, allow_blank=True, default="")
        step = StrictCharField(max_length=100, required=False)

    class CompleteSerializer(ClosedSerializer):
        result = serializers.JSONField(required=False, allow_null=True)

    class FailSerializer(ClosedSerializer):
        code = StrictRegexField(
            r"^[a-z][a-z0-9_]{0,63}$",
            rule="a lower-case letter, then up to 63 lower-case letters, digits or '_'",
        )
        detail = StrictCharField(max_length=2000, required=False, allow_blank=True, default="")

    class SpentSerializer(ClosedSerializer):
        # What one step can have spent: past these a worker's figure is a bug or an attack (a wall
        # time of 1e308 s made the run's engineer page unrenderable; a cost of 1e308 overflowed the
        # budget's total).
        tokens = StrictIntegerField(min_value=0, max_value=MAX_STEP_TOKENS, default=0)
        cost_usd = StrictFloatField(min_value=0, max_value=MAX_STEP_COST_USD, default=0.0)
        wall_s = StrictFloatField(min_value=0, max_value=MAX_STEP_WALL_S, default=0.0)

        def to_internal_value(self, data: Any) -> Any:
            # A misspelt figure ({"token": 900}) would be charged as nothing: refused instead.
            if isinstance(data, dict) and (unknown := sorted(set(data) - set(self.fields))):
                raise serializers.ValidationError(
                    {key: [f"not a figure a step spends ({', '.join(self.fields)})"] for key in unknown}
                )
            return super().to_internal_value(data)

    class InputSerializer(LeaseInputSerializer):
        expected_revision = StrictIntegerField(min_value=1)
        state = serializers.JSONField()
        next_step = StrictCharField(max_length=100, required=False)
        suspend = serializers.DictField(required=False)
        complete = serializers.DictField(required=False)
        # A body field named like Serializer.fail(); the metaclass moves it to the declared fields.
        fail = serializers.DictField(required=False)  # type: ignore[assignment]
        payload = serializers.DictField(required=False, default=dict)
        spent = serializers.DictField(required=False, default=dict)
        keep_lease = StrictBooleanField(default=False)

        def validate(self, data: dict[str, Any]) -> dict[str, Any]:
            given = [k for k in ("next_step", "suspend", "complete", "fail") if k in data]
            if len(given) != 1:
                raise serializers.ValidationError("give exactly one of next_step, suspend, complete, fail")
            return data

    @extend_schema(
        summary="Commit the claimed step (one statement, fenced by revision and lease)",
        description="409 `stale_revision` or `lease_lost` (with `current_revision`) when the run moved on: "
        "nothing was written. The same commit sent again after a lost answer returns its first answer "
        "with `replayed: true`.",
        request=InputSerializer,
        responses={200: CommitOutputSerializer, **error_responses(409, 422)},
        examples=[
            OpenApiExample(
                "example",
                value={
                    "lease_token": "lt1.eyJ...signed",
                    "expected_revision": 2,
                    "state": {"order_id": "o-1"},
                    "next_step": "refund",
                    "payload": {"note": "looked up"},
                },
                request_only=True,
            )
        ],
    )
    def post(self, request: Request, run_id: UUID) -> Response:
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data
        lease = lease_of_request(request, run_id, v["lease_token"])
        spent_in = self.SpentSerializer(data=v["spent"])
        spent_in.is_valid(raise_exception=True)
        spent = {"steps": 1, **spent_in.validated_data}
        if "next_step" in v:
            outcome = protocol.Outcome("next", next_step=v["next_step"])
        elif "suspend" in v:
            s = self.SuspendSerializer(data=v["suspend"])
            s.is_valid(raise_exception=True)
            sv = s.validated_data
            outcome = protocol.Outcome(
                "suspend", next_step=sv.get("step"), reason=sv["reason"], detail=sv["detail"]
            )
        elif "complete" in v:
            c = self.CompleteSerializer(data=v["complete"])
            c.is_valid(raise_exception=True)
            outcome = protocol.Outcome("complete", result=c.validated_data.get("result"))
        else:
            f = self.FailSerializer(data=v["fail"])
            f.is_valid(raise_exception=True)
            outcome = protocol.Outcome(
                "fail", reason=f.validated_data["code"], detail=f.validated_data["detail"]
            )
        committed = protocol.external_commit(
            lease=lease,
            expected_revision=v["expected_revision"],
            state=v["state"],
            outcome=outcome,
            payload=v["payload"],
            spent=spent,
            keep_lease=v["keep_lease"],
        )
        return Response(CommitOutputSerializer(committed).data)


class WorkerHeartbeatApi(WorkerRunApiView):
    class InputSerializer(LeaseInputSerializer):
        lease_ttl = StrictFloatField(min_value=1, max_value=3600, required=False)

    @extend_schema(
        summary="Extend the lease while a step runs (409 lease_lost: stop, the commit would be refused)",
        request=InputSerializer,
        responses={
            200: inline_serializer("WorkerHeartbeat", {"lease_expires_at": serializers.DateTimeField()}),
            **error_responses(409),
        },
        examples=[OpenApiExample("example", value={"lease_token": "lt1.eyJ...signed"}, request_only=True)],
    )
    def post(self, request: Request, run_id: UUID) -> Response:
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        lease = lease_of_request(request, run_id, data.validated_data["lease_token"])
        expires = protocol.external_heartbeat(lease=lease, ttl=data.validated_data.get("lease_ttl"))
        return Response({"lease_expires_at": expires})


class WorkerLookupsApi(WorkerRunApiView):
    class LookupSerializer(ClosedSerializer):
        operation_id = StrictCharField(max_length=200)
        authoritative = StrictBooleanField()
        applied = StrictBooleanField(allow_null=True)
        external_ref = StrictCharField(max_length=500, required=False, allow_null=True, default=None)
        result = serializers.JSONField(required=False, allow_null=True, default=None)

    class InputSerializer(LeaseInputSerializer):
        lookups = serializers.ListField(child=serializers.DictField(), max_length=100)

    @extend_schema(
        summary="Report what your lookups find for the operations in doubt of a run you took over",
        description="After a claim with `lookups_needed`: one entry per operation in doubt (`applied` true, "
        "false or null; `authoritative` only if your lookup by the idempotency key is the outside system's "
        "answer, including for requests still in progress). Resume verification then decides as it does for "
        "Keeper's own tools: 200 with the claim to go on with, or 409 `resume_refused` (a person reconciles).",
        request=InputSerializer,
        responses={200: CLAIM, **error_responses(409, 422)},
        examples=[
            OpenApiExample(
                "example",
                value={
                    "lease_token": "lt1.eyJ...signed",
                    "lookups": [{"operation_id": "refund:o-1", "authoritative": True, "applied": False}],
                },
                request_only=True,
            )
        ],
    )
    def post(self, request: Request, run_id: UUID) -> Response:
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        lease = lease_of_request(request, run_id, data.validated_data["lease_token"])
        answers: dict[str, Lookup] = {}
        for raw in data.validated_data["lookups"]:
            item = self.LookupSerializer(data=raw)
            item.is_valid(raise_exception=True)
            v = item.validated_data
            answers[v["operation_id"]] = Lookup(
                v["authoritative"], v["applied"], v["external_ref"], v["result"]
            )
        return Response(_claimed(protocol.external_lookups(lease=lease, lookups=answers)))


class WorkerReleaseApi(WorkerRunApiView):
    class InputSerializer(LeaseInputSerializer):
        retry_in = StrictFloatField(min_value=0, max_value=86400, default=0)
        attempted = StrictBooleanField(
            default=False,
            help_text="true: the step ran and failed (the try counts toward KEEPER_MAX_ATTEMPTS); a release "
            "without trying gives the claim's try back",
        )

    @extend_schema(
        summary="Give the run back without committing (another worker may claim it after retry_in seconds)",
        request=InputSerializer,
        responses={
            200: inline_serializer("WorkerReleased", {"released": serializers.BooleanField()}),
            **error_responses(409),
        },
        examples=[
            OpenApiExample(
                "example", value={"lease_token": "lt1.eyJ...signed", "retry_in": 5}, request_only=True
            )
        ],
    )
    def post(self, request: Request, run_id: UUID) -> Response:
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        lease = lease_of_request(request, run_id, data.validated_data["lease_token"])
        v = data.validated_data
        protocol.external_release(lease=lease, retry_in=v["retry_in"], attempted=v["attempted"])
        return Response({"released": True})
