"""OpenTelemetry spans for API requests, steps, operations and commits; off (a no-op) unless an
OTLP endpoint or a traces exporter is configured through the standard OTEL_* variables."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any, TypeVar

T = TypeVar("T")

# The only attributes a span may carry: ids, names of code, numbers and codes, never a subject's data
# (a state, a message, a customer id). Anything else given to span() is dropped.
ALLOWED_ATTRIBUTES = frozenset(
    {
        "keeper.run_id",
        "keeper.tenant_id",
        "keeper.step",
        "keeper.revision",
        "keeper.workflow",
        "keeper.workflow_version",
        "keeper.status",
        "keeper.event_type",
        "keeper.operation_id",
        "keeper.tool",
        "keeper.outcome",
        "http.request.method",
        "http.route",
        "http.response.status_code",
    }
)

_NOOP: AbstractContextManager[None] = nullcontext()
_state: dict[str, Any] = {"tracer": None}


def tracing_configured(environ: Mapping[str, str] | None = None) -> bool:
    """On when OTEL_EXPORTER_OTLP_ENDPOINT (or its traces variant) or OTEL_TRACES_EXPORTER is set,
    unless OTEL_SDK_DISABLED is true or the exporter is `none`."""
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return False
    exporter = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter == "none":
        return False
    return bool(
        exporter or env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    )


def tracing_setup() -> bool:
    """Install the SDK's tracer provider with the exporter the OTEL_* variables name (once per process).

    Needs the `otel` extra; without it a configured process says so and runs untraced.
    """
    if _state["tracer"] is not None or not tracing_configured():
        return _state["tracer"] is not None
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.resources import OTELResourceDetector, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter
    except ImportError:
        import logging

        logging.getLogger(__name__).warning(
            "OTEL_* is set but opentelemetry-sdk is not installed (extra `otel`)"
        )
        return False
    resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME", "keeper")}).merge(
        OTELResourceDetector().detect()
    )
    provider = TracerProvider(resource=resource)
    exporters = [e.strip() for e in os.environ.get("OTEL_TRACES_EXPORTER", "otlp").lower().split(",")]
    for name in exporters:
        if name == "console":
            provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
        elif name in ("otlp", ""):
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))  # reads OTEL_EXPORTER_OTLP_*
    trace.set_tracer_provider(provider)
    tracing_use(provider)
    return True


def tracing_use(provider: Any | None) -> None:
    """Trace with this provider from now on (tests give one with an in-memory exporter); None: off."""
    _state["tracer"] = None if provider is None else provider.get_tracer("keeper")


def tracing_on() -> bool:
    return _state["tracer"] is not None


def _clean(attributes: Mapping[str, Any]) -> dict[str, Any]:
    return {
        k: (v if isinstance(v, bool | int | float | str) else str(v))
        for k, v in attributes.items()
        if k in ALLOWED_ATTRIBUTES and v is not None
    }


def span(name: str, attributes: Mapping[str, Any] | None = None, *, traceparent: str | None = None) -> Any:
    """A span around a block (`with span("keeper.commit", {...}):`); a shared no-op when tracing is off.

    `traceparent`: a W3C trace context the span continues (an outside agent's), else the current one.
    """
    tracer = _state["tracer"]
    if tracer is None:
        return _NOOP
    return _span(tracer, name, attributes or {}, traceparent)


@contextmanager
def _span(tracer: Any, name: str, attributes: Mapping[str, Any], traceparent: str | None) -> Iterator[Any]:
    context = None
    if traceparent:
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        context = TraceContextTextMapPropagator().extract({"traceparent": traceparent})
    with tracer.start_as_current_span(name, context=context, attributes=_clean(attributes)) as current:
        yield current


def traced(
    name: str, attributes: Callable[[dict[str, Any]], Mapping[str, Any]]
) -> Callable[[Callable[..., T]], Callable[..., T]]:
    """A span around every call of a keyword-only function, its attributes read from the call's
    keywords; when tracing is off the call goes straight through."""

    def decorate(function: Callable[..., T]) -> Callable[..., T]:
        @functools.wraps(function)
        def call(**kwargs: Any) -> T:
            if _state["tracer"] is None:
                return function(**kwargs)
            with span(name, attributes(kwargs)):
                return function(**kwargs)

        return call

    return decorate


def span_set(current: Any, attributes: Mapping[str, Any]) -> None:
    """Add attributes to a span from span() (nothing when tracing is off)."""
    if current is not None:
        current.set_attributes(_clean(attributes))


def current_traceparent() -> str | None:
    """The W3C traceparent of the current span (to hand to a worker), None when off or outside a span."""
    if _state["tracer"] is None:
        return None
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier)
    return carrier.get("traceparent")


class TracingMiddleware:
    """A server span per API request, continuing the caller's W3C `traceparent` header if it sends one.

    Named by the route (`POST api/v1/workers/runs/<uuid:run_id>/commit`), never by the path or query.
    """

    def __init__(self, get_response: Callable[[Any], Any]):
        self.get_response = get_response

    def __call__(self, request: Any) -> Any:
        if _state["tracer"] is None or not request.path.startswith("/api/"):
            return self.get_response(request)
        with span(
            f"{request.method} api",
            {"http.request.method": request.method},
            traceparent=request.headers.get("traceparent"),
        ) as current:
            response = self.get_response(request)
            match = getattr(request, "resolver_match", None)
            route = getattr(match, "route", None) or "unmatched"
            current.update_name(f"{request.method} {route}")
            from core.logging import log_tenant_current

            tenant = log_tenant_current()
            span_set(
                current,
                {
                    "http.route": route,
                    "http.response.status_code": response.status_code,
                    "keeper.tenant_id": tenant,
                },
            )
            return response
