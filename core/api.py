"""The one error body of the REST API: {"error": {"code", "message", "details"}}."""

from __future__ import annotations

import re
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig, SuspiciousOperation
from django.http import HttpRequest, JsonResponse
from django.urls import Resolver404, resolve
from django.views.decorators.csrf import csrf_exempt
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import Direction, OpenApiResponse
from rest_framework import exceptions, serializers, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from core.errors import ApplicationError


def error_response(code: str, message: str, http_status: int, details: Any = None) -> Response:
    return Response(
        {"error": {"code": code, "message": message, "details": details or {}}}, status=http_status
    )


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, ApplicationError):
        return error_response(exc.code, exc.message, exc.http_status, exc.details)
    if isinstance(exc, RequestDataTooBig):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE  # the size a client may send again (None: no limit)
        return error_response(
            "request_too_large", str(exc), status.HTTP_413_REQUEST_ENTITY_TOO_LARGE, {"max_bytes": limit}
        )
    if isinstance(exc, SuspiciousOperation):  # too many form fields or files: Django's limits
        return error_response("invalid_input", str(exc), status.HTTP_400_BAD_REQUEST)
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, exceptions.ValidationError):
        return error_response(
            "invalid_input", "the request is not valid", status.HTTP_400_BAD_REQUEST, exc.detail
        )
    code = getattr(exc, "default_code", "error")
    detail = response.data.get("detail", "") if isinstance(response.data, dict) else response.data
    # Throttled.__init__ sets `wait`; the DRF stubs leave the attribute out.
    wait = exc.wait if isinstance(exc, exceptions.Throttled) else None  # type: ignore[attr-defined]
    details = {"retry_after": wait} if wait else None
    wrapped = error_response(str(code), str(detail), response.status_code, details)
    for header in ("WWW-Authenticate", "Retry-After"):  # a 401 names the scheme; a 429 says when to retry
        if header in response:
            wrapped[header] = response[header]
    return wrapped


class ErrorSerializer(serializers.Serializer[dict[str, Any]]):
    """The error body of every 4xx (for the OpenAPI schema)."""

    class ErrorBody(serializers.Serializer[dict[str, Any]]):
        code = serializers.CharField()
        message = serializers.CharField()
        details = serializers.JSONField()

    error = ErrorBody()


_ERROR_MEANINGS = {
    400: "the request is not valid (wrong types, missing fields, unknown values)",
    401: "no valid API key",
    403: "not allowed (a read key on a write endpoint, or not a staff user)",
    404: "no such object for this tenant",
    409: "the state does not allow this, or the idempotency key was used for another request",
    413: "the body is too large",
    415: "unsupported media type",
    422: "the input breaks a business rule",
    429: "too many requests for this key",
}


def error_responses(*extra: int) -> dict[int, OpenApiResponse]:
    """The error responses an endpoint documents: the common ones and `extra`."""
    return {
        code: OpenApiResponse(ErrorSerializer, description=_ERROR_MEANINGS[code])
        for code in sorted({400, 401, 403, 404, 429, *extra})
    }


class ApiKeyAuthenticationScheme(OpenApiAuthenticationExtension):
    """The OpenAPI security scheme of API keys (every API module imports this one, which registers it)."""

    target_class = "core.api_auth.ApiKeyAuthentication"
    name = "ApiKey"

    def get_security_definition(self, auto_schema: object) -> dict[str, str]:
        return {"type": "http", "scheme": "bearer", "bearerFormat": "kp_<prefix>_<secret>"}


class StrictCharField(serializers.CharField):
    """A text field of a JSON body that takes only JSON strings (DRF's CharField turns a number into
    its digits: `{"query": 42}` would search for "42")."""

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return str(super().to_internal_value(data))


class StrictRegexField(serializers.RegexField):
    """StrictCharField's rule for a pattern-checked text (an operation id sent as 42 is not "42"); a
    refusal says the rule in words (not "does not match the required pattern")."""

    def __init__(self, regex: str, *, rule: str, **kwargs: Any) -> None:
        kwargs.setdefault("error_messages", {"invalid": f"must be {rule}"})
        super().__init__(regex, **kwargs)

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return str(super().to_internal_value(data))


class ClosedSerializer(serializers.Serializer[dict[str, Any]]):
    """A JSON body that takes only its own fields: a misspelt one ("subjct", "enable") is a 400 naming
    it instead of being dropped (a run started with "subjct" would have no subject, so no erasure of
    that person would ever find it; a schedule sent "enable": false would fire)."""

    # Names the view reads itself (a multipart upload's `file`), not through the serializer.
    read_by_view: tuple[str, ...] = ()

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        # Here rather than in validate(), which a subclass overrides to check its own rules: the
        # worker's commit body did, and took {"bogus_field": 1} without a word.
        given = data if isinstance(data, dict) else {}
        unknown = sorted(str(name) for name in set(given) - set(self.fields) - set(self.read_by_view))
        if unknown:
            raise serializers.ValidationError(
                {name: "unknown field; this takes " + ", ".join(self.fields) for name in unknown}
            )
        return dict(super().to_internal_value(data))


class QuerySerializer(ClosedSerializer):
    """A list's query parameters: only its own filters. An unknown one (`?run=…` for `?run_id=…`) is
    a 400 naming it, never ignored: a client acting on the first result of an unfiltered list would
    act on the wrong object."""

    # DRF's own ?format=json, and the tenant every endpoint takes (a key's own, or 404: request_tenant)
    read_by_view = ("format", "tenant")

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        # A filter given twice (`?run_id=A&run_id=B`) is a 400: taking one of them silently lists
        # what the client did not ask for.
        if hasattr(data, "getlist"):
            repeated = sorted(str(name) for name in data if len(data.getlist(name)) > 1)
            if repeated:
                raise serializers.ValidationError(
                    {name: "given more than once; this filter takes one value" for name in repeated}
                )
            data = data.dict()
        return super().to_internal_value(data)


BIGINT_MAX = 2**63 - 1  # what PostgreSQL's bigint holds: past it a number is a 500 from the database


class StrictIntegerField(serializers.IntegerField):
    """An integer field of a JSON body that takes only JSON integers (not "5", not true, not 5.5),
    within a bigint unless the field says less."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("max_value", BIGINT_MAX)
        kwargs.setdefault("min_value", -BIGINT_MAX - 1)
        super().__init__(**kwargs)

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return int(super().to_internal_value(data))


class StrictFloatField(serializers.FloatField):
    """A number field of a JSON body that takes only JSON numbers (not "1.5", not true)."""

    def to_internal_value(self, data: Any) -> float:
        if isinstance(data, bool) or not isinstance(data, int | float):
            self.fail("invalid")
        return float(super().to_internal_value(data))


class StrictBooleanField(serializers.BooleanField):
    """A flag of a JSON body that takes only true or false (DRF's BooleanField also takes "yes", "0",
    1 and "off": `{"start": "false"}` was a false start only by luck of the spelling). With
    `form_text=True`, a form's body (multipart or urlencoded, where every value is text) may say
    "true", "1", "yes" or "on" as DRF reads them; a JSON body still may not."""

    def __init__(self, *, form_text: bool = False, **kwargs: Any) -> None:
        self.form_text = form_text
        super().__init__(**kwargs)

    def to_internal_value(self, data: Any) -> bool:
        if isinstance(data, bool):
            return data
        request = self.context.get("request")
        if self.form_text and isinstance(data, str) and request is not None and _form_body(request):
            return bool(super().to_internal_value(data))
        self.fail("invalid", input=data)
        raise AssertionError  # self.fail raises


def _form_body(request: Any) -> bool:
    media = str(getattr(request, "content_type", "") or "").split(";")[0].strip().lower()
    return media in ("multipart/form-data", "application/x-www-form-urlencoded")


class TenantParameterSerializer(serializers.Serializer[dict[str, Any]]):
    """The `tenant` query parameter (slug or id); with an API key it may be left out (or empty)."""

    tenant = serializers.CharField(max_length=64, required=False, allow_blank=True)


class KeeperAutoSchema(AutoSchema):
    """Names nested `InputSerializer`s after their view (`RunStartApi.InputSerializer` → `RunStartInput`),
    and operations after their view class, so that one view per action gives unique names."""

    def get_serializer_name(self, serializer: serializers.Serializer[Any], direction: Direction) -> str:
        qualname = type(serializer).__qualname__
        if "." in qualname:
            owner, _, own = qualname.rpartition(".")
            return owner.replace(".", "").removesuffix("Api") + own
        return super().get_serializer_name(serializer, direction)

    def get_operation_id(self) -> str:
        view_name = re.sub(r"(?<!^)(?=[A-Z])", "_", type(self.view).__name__.removesuffix("Api")).lower()
        return f"{view_name}_{self.method.lower()}"


# A UUID in any case: the routes take the lower-case form Keeper writes; RFC 9562 reads either.
_UUID = re.compile(r"(?<![0-9A-Za-z])[0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}(?![0-9A-Za-z])")


def uuids_lowered(path: str) -> str:
    """The path with every UUID in it written in lower case (the API's and the console's routes)."""
    return _UUID.sub(lambda m: m.group(0).lower(), path)


@csrf_exempt  # no state changes here; a POST deserves the JSON 404 too, not the CSRF page
def api_not_found(request: HttpRequest, path: str = "") -> Any:
    """A URL under /api/v1/ that no route matches (an unknown path, or an id of the wrong form):
    the error body, not Django's HTML page. The last pattern of the API's URL map.

    An id written in upper case (a UUID from another system's tools) is the same id: the request goes
    to the route it names in lower case."""
    lowered = uuids_lowered(request.path_info)
    if lowered != request.path_info:
        try:
            match = resolve(lowered)
        except Resolver404:
            match = None
        if match is not None and match.func is not api_not_found:
            request.path_info, request.resolver_match = lowered, match
            return match.func(request, *match.args, **match.kwargs)
    body = {"error": {"code": "not_found", "message": f"no API endpoint {request.path}", "details": {}}}
    return JsonResponse(body, status=404)
