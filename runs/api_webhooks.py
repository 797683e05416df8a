"""REST API for webhook subscriptions: create (the secret is shown once), list, delete."""

from __future__ import annotations

from uuid import UUID

from drf_spectacular.utils import OpenApiExample, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api import ClosedSerializer, StrictCharField, error_responses
from core.api_auth import request_actor, request_tenant
from core.roles import ENGINEER
from runs.webhooks.models import EVENT_TYPES, WebhookSubscription
from runs.webhooks.services import (
    webhook_subscription_create,
    webhook_subscription_delete,
    webhook_subscriptions_active,
)


class WebhookSerializer(serializers.ModelSerializer):
    class Meta:
        model = WebhookSubscription
        fields = ["id", "url", "event_types", "created_by", "created_at"]  # never the secret


class WebhookCreatedSerializer(WebhookSerializer):
    secret = StrictCharField(help_text="shown once: keep it to verify Keeper-Signature")

    class Meta(WebhookSerializer.Meta):
        fields = [*WebhookSerializer.Meta.fields, "secret"]


class WebhookListApi(APIView):
    session_roles = (ENGINEER,)  # a staff session's change needs the console's role for it

    class InputSerializer(ClosedSerializer):
        tenant = StrictCharField(
            required=False, help_text="optional for an API key (its own tenant); staff name one"
        )
        url = StrictCharField(max_length=2000, help_text="https endpoint that receives the POSTs")
        event_types = serializers.ListField(
            child=StrictCharField(max_length=100),
            help_text="any of: " + ", ".join(EVENT_TYPES),
        )

    @extend_schema(
        summary="Subscribe an endpoint to run events (the signing secret is in this response only)",
        request=InputSerializer,
        responses={201: WebhookCreatedSerializer, **error_responses(409, 422)},
        examples=[
            OpenApiExample(
                "completed and failed runs",
                value={
                    "url": "https://hooks.example.com/keeper",
                    "event_types": ["run.completed", "run.failed"],
                },
                request_only=True,
            )
        ],
    )
    def post(self, request: Request) -> Response:
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        given = data.validated_data.pop("tenant", None) or request.query_params.get("tenant")
        created = webhook_subscription_create(
            tenant=request_tenant(request, given), actor=request_actor(request), **data.validated_data
        )
        body = dict(WebhookSerializer(created.subscription).data)
        body["secret"] = created.secret
        return Response(body, status=201)

    @extend_schema(
        summary="List this tenant's webhook subscriptions (without their secrets)",
        responses={200: WebhookSerializer(many=True), **error_responses()},
    )
    def get(self, request: Request) -> Response:
        request_tenant(request, request.query_params.get("tenant"))
        return Response(WebhookSerializer(webhook_subscriptions_active(), many=True).data)


class WebhookDetailApi(APIView):
    session_roles = (ENGINEER,)  # a staff session's change needs the console's role for it

    @extend_schema(
        summary="Delete a subscription: nothing more is sent to it, pending deliveries are cancelled",
        responses={204: None, **error_responses(404)},
    )
    def delete(self, request: Request, webhook_id: UUID) -> Response:
        request_tenant(request, request.query_params.get("tenant"))
        webhook_subscription_delete(subscription_id=webhook_id, actor=request_actor(request))
        return Response(status=204)
