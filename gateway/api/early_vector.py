"""A first chat question's query vector, begun as the request's bytes arrive, before Litestar routes it (issue 17).

An ``auto`` question's path waits for its embedding (~0.7-0.9 ms on ONNX Runtime's thread, the longest stretch
of it), and the handler used to begin it only after Litestar had routed the request, run the key hook, read and
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

import logging
from dataclasses import dataclass

import msgspec
from litestar import Litestar
from litestar.connection import ASGIConnection
from litestar.enums import ScopeType
from litestar.types import ASGIApp, Receive, ReceiveMessage, Scope, Send

from gateway.access.guard import Access, RequireScope
from gateway.access.keys import Principal
from gateway.api.validation import prepare_chat
from gateway.chat.completions import PreparedChat
from gateway.chat.wire import ChatCompletionRequest
from gateway.errors import GatewayError
from gateway.query_vector import QueryVector
from gateway.state import Services

logger = logging.getLogger(__name__)

CHAT_PATH = "/v1/chat/completions"
# Where the handler finds it: a key of the request's scope state (``request.state``).
EARLY_VECTOR = "early_query_vector"


@dataclass(frozen=True, slots=True)
class EarlyVector:
    """A vector begun before Litestar routed the request, with the request and chat it was begun for."""

    request: ChatCompletionRequest
    principal: Principal
    prepared: PreparedChat
    vector: QueryVector


def install(app: Litestar, hook: RequireScope) -> None:
    """Puts the layer in front of ``app``'s router, inside ``Litestar.__call__`` (which has set the scope's app and
    state), the place Litestar's own OpenTelemetry plugin wraps. App middleware would come too late: Litestar runs it
    once the route is matched. ``hook``: the chat routes' key hook, whose admission the layer mirrors."""
    app.asgi_handler = begin_chat_vectors(app.asgi_handler, hook)


def begin_chat_vectors(app: ASGIApp, hook: RequireScope) -> ASGIApp:
    """``app`` with chat questions' vectors begun before it sees the request (the module docstring says which)."""

    async def early_vectors(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != ScopeType.HTTP or scope.get("method") != "POST" or _route_path(scope) != CHAT_PATH:
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
    read the body from. Raises nothing a request could cause: this layer is outside Litestar's exception handlers, so
    whatever is wrong with a request is left for the app to answer."""
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
    except Exception:  # anything else a body can cause (nested past the decoder's depth: RecursionError)
        logger.debug("no early vector: the body did not decode as a chat request", exc_info=True)
        return None, replay  # outside Litestar's exception handlers: the app answers it, as a problem
    if request.stream or prepared.history:
        return None, replay
    vector = await services.query_service.begin_vector(prepared.query.query, prepared.query.route)
    if not vector.early:
        return None, replay
    early = EarlyVector(request, principal, prepared, vector)
    scope["state"][EARLY_VECTOR] = early
    return early, replay


def _route_path(scope: Scope) -> str:
    """The path Litestar routes (``root_path`` off its front, as its router takes it off)."""
    path: str = scope["path"]
    root = scope.get("root_path", "")
    return path[len(root) :] if root and path.startswith(root) else path


# Longer than any body the limits let through (and within what int() converts without refusing).
_LENGTH_DIGITS = 19


def _content_length(scope: Scope) -> int | None:
    """The declared body length; None (no early vector: the body may come in pieces) when it is missing or not a
    plain number. Only a declared, bounded body is read ahead of the app."""
    for name, value in scope["headers"]:
        if name == b"content-length":
            return int(value) if value.isdigit() and len(value) <= _LENGTH_DIGITS else None
    return None


def _replaying(first: ReceiveMessage, receive: Receive) -> Receive:
    """``receive`` handing out ``first`` (already read) once, then reading on."""
    pending: list[ReceiveMessage] = [first]

    async def replay() -> ReceiveMessage:
        if pending:
            return pending.pop()
        return await receive()

    return replay
