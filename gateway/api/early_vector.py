"""A first chat question's query vector, begun as the request's bytes arrive, before Litestar routes it (issue 17).

An ``auto`` question's path waits for its embedding (~0.7 ms on ONNX Runtime's thread, the longest stretch of
it), and the handler used to begin it only after Litestar had routed the request, run the key hook, read and
validated the body and resolved the handler's dependencies: some 0.2 ms of a serving process's event loop with
ONNX Runtime's thread idle, measured with a timeline inside a running gateway. This layer, placed in front of
Litestar's router (:func:`install`), begins it first, for exactly the requests whose handler would begin it, and
hands it over in the request's scope state:

- ``POST /v1/chat/completions``, its whole body in the first message and within ``GATEWAY_MAX_BODY_BYTES``;
- a caller the chat routes' key hook admits whatever the limiter counts (:meth:`RequireScope.admits_outright`:
  open mode, or a valid key with the ``query`` scope and neither a rate nor a token limit), so that a request the
  hook refuses never costs an embedding;
- a body that validates as the handler validates it (the same ``ChatCompletionRequest`` and ``prepare_chat``),
  not streamed (a stream begins its vector once its response has begun) and with no earlier turns (a follow-up is
  routed as rewritten);
- a route whose answer reads the vector, where the text never leaves the process: ``QueryService.begin_vector``
  decides, as it does for the handler.

Everything else the request is, Litestar and the handler still check and answer: the body is replayed to them as
it came. The handler uses the vector (and the chat it prepared) only for the very request Litestar parsed
(:meth:`gateway.api.chat.ChatScope.begin_vector`); a vector it did not take is let go once the response is done.
"""

from __future__ import annotations

from dataclasses import dataclass

import msgspec
from litestar import Litestar
from litestar.connection import ASGIConnection
from litestar.enums import ScopeType
from litestar.types import ASGIApp, Receive, ReceiveMessage, Scope, Send

from gateway.access.guard import Access, RequireScope
from gateway.api.validation import prepare_chat
from gateway.chat.completions import PreparedChat
from gateway.chat.wire import ChatCompletionRequest
from gateway.errors import GatewayError
from gateway.query_vector import QueryVector
from gateway.state import Services

CHAT_PATH = "/v1/chat/completions"
# Where the handler finds it: a key of the request's scope state (``request.state``).
EARLY_VECTOR = "early_query_vector"


@dataclass(frozen=True, slots=True)
class EarlyVector:
    """A vector begun before Litestar routed the request, with the request and chat it was begun for."""

    request: ChatCompletionRequest
    prepared: PreparedChat
    vector: QueryVector


def install(app: Litestar, hook: RequireScope) -> None:
    """Puts the layer in front of ``app``'s router, inside ``Litestar.__call__`` (which has set the scope's app and
    state), the place Litestar's own OpenTelemetry plugin wraps. App middleware would come too late: Litestar runs it
    once the route is matched. ``hook``: the chat routes' key hook, whose admission the layer mirrors."""
    app.asgi_handler = begin_chat_vectors(app.asgi_handler, hook)


def begin_chat_vectors(app: ASGIApp, hook: RequireScope) -> ASGIApp:
    async def early_vectors(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != ScopeType.HTTP or scope["path"] != CHAT_PATH or scope.get("method") != "POST":
            await app(scope, receive, send)
            return
        early, receive = await _begin(scope, receive, hook)
        try:
            await app(scope, receive, send)
        finally:
            if early is not None:
                early.vector.release()  # not taken; or taken, and then the reader's (a no-op)

    return early_vectors


async def _begin(scope: Scope, receive: Receive, hook: RequireScope) -> tuple[EarlyVector | None, Receive]:
    """The vector begun for this request (None: the handler begins its own, if any) and the ``receive`` the app must
    read the body from. Raises nothing a request could cause: whatever is wrong with it, the app answers."""
    litestar_state = getattr(scope.get("app"), "state", None)
    services: Services | None = getattr(litestar_state, "services", None)
    access: Access | None = getattr(litestar_state, "access", None)
    if services is None or access is None or not services.query_service.early_vectors:
        return None, receive
    settings = services.settings
    length = _content_length(scope)
    if length is None or length > settings.limits.max_body_bytes:
        return None, receive
    principal = hook.admits_outright(access, ASGIConnection(scope))
    if principal is None:
        return None, receive
    first = await receive()
    replay = _replaying(first, receive)
    if first["type"] != "http.request" or first.get("more_body", False):
        return None, replay
    try:
        request = msgspec.json.decode(first.get("body", b""), type=ChatCompletionRequest)
        prepared = prepare_chat(request, principal, settings.chat, settings.limits)
    except (msgspec.DecodeError, msgspec.ValidationError, GatewayError):
        return None, replay  # the handler refuses it (a 4xx), as it would have
    if request.stream or prepared.history:
        return None, replay
    vector = await services.query_service.begin_vector(prepared.query.query, prepared.query.route)
    if not vector.early:
        return None, replay
    early = EarlyVector(request, prepared, vector)
    scope["state"][EARLY_VECTOR] = early
    return early, replay


def _content_length(scope: Scope) -> int | None:
    for name, value in scope["headers"]:
        if name == b"content-length":
            return int(value) if value.isdigit() else None
    return None


def _replaying(first: ReceiveMessage, receive: Receive) -> Receive:
    """``receive`` handing out ``first`` (already read) once, then reading on."""
    pending: list[ReceiveMessage] = [first]

    async def replay() -> ReceiveMessage:
        if pending:
            return pending.pop()
        return await receive()

    return replay
