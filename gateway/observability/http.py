"""The server span of each HTTP request, continuing the caller's W3C ``traceparent``, and ``X-Trace-Id``.

An ASGI middleware rather than a handler decorator, so every API route (``/v1/query`` and any route
added later) gets it. Probe and scrape routes are left untraced: they would drown the real traces.
"""

from __future__ import annotations

from typing import Any

from litestar.enums import ScopeType
from litestar.types import ASGIApp, Message, Receive, Scope, Send
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from gateway.observability.recorder import Telemetry
from gateway.observability.tracing import trace_id_of

TRACE_HEADER = b"x-trace-id"
UNTRACED = frozenset({"/metrics", "/healthz", "/readyz"})
_PROPAGATOR = TraceContextTextMapPropagator()


def _telemetry(scope: Scope) -> Telemetry | None:
    state = getattr(scope.get("app"), "state", None)
    found = getattr(state, "telemetry", None) if state is not None else None
    return found if isinstance(found, Telemetry) else None


def _route_of(scope: Scope) -> str:
    """The route template (``/v1/documents/{doc_id:str}``), never the raw path: span names stay bounded."""
    template = scope.get("path_template")
    return template if isinstance(template, str) else "unmatched"


def trace_requests(app: ASGIApp) -> ASGIApp:
    async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
        telemetry = _telemetry(scope)
        traced = telemetry is not None and telemetry.provider is not None and scope["path"] not in UNTRACED
        if scope["type"] != ScopeType.HTTP or telemetry is None or not traced:
            await app(scope, receive, send)
            return
        carrier: dict[str, str] = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        method = scope.get("method", "GET")
        route = _route_of(scope)
        attributes: dict[str, Any] = {"http.request.method": method, "http.route": route, "url.path": scope["path"]}
        with telemetry.tracer.start_as_current_span(
            f"{method} {route}", context=_PROPAGATOR.extract(carrier), kind=SpanKind.SERVER, attributes=attributes
        ) as span:
            trace_id = (trace_id_of(span) or "").encode()

            async def send_with_trace(message: Message) -> None:
                if message["type"] == "http.response.start":
                    status = int(message["status"])
                    span.set_attribute("http.response.status_code", status)
                    if status >= 500:
                        span.set_status(Status(StatusCode.ERROR))
                    if trace_id:
                        message["headers"] = [*message.get("headers", []), (TRACE_HEADER, trace_id)]
                await send(message)

            await app(scope, receive, send_with_trace)

    return middleware
