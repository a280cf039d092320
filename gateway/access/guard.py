"""Authentication and rate limiting, run before a handler reads its body.

Keys come from ``Authorization: Bearer <key>`` (what the ``openai`` client sends) or ``x-api-key``.
The check stores the :class:`Principal` on the connection state; handlers receive it through the
``principal`` dependency. Neither the key nor its digest is logged: only the key's configured name.

Each controller runs :func:`require` as its ``before_request`` hook rather than as a guard. Both run before the
handler's arguments are read (the body too), and an error from either is answered by the same exception handlers;
but Litestar hands every guard call a copy of the route handler (``copy(handler)``, an object of some seventy
fields), ~12 µs of CPU hot and 0.05-0.1 ms of a request's path in a serving process, for a check
that never looks at it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from litestar.connection import ASGIConnection
from litestar.openapi.spec import Reference, SecurityScheme

from gateway.access.identity import Identity, Reader, check_vouched, record
from gateway.access.keys import ANONYMOUS, KeyRing, Principal, Scope, check_exposure
from gateway.access.limits import LocalRateLimiter, RateLimiter, RedisRateLimiter
from gateway.errors import AuthenticationError, PermissionDeniedError, RateLimitedError
from gateway.providers import ResilientRedis
from gateway.settings import AccessSettings

logger = logging.getLogger(__name__)

PRINCIPAL = "principal"
BEARER = "apiKey"  # the OpenAPI security scheme of every guarded endpoint
SECURITY_SCHEMES: dict[str, SecurityScheme | Reference] = {
    BEARER: SecurityScheme(
        type="http",
        scheme="bearer",
        description="A gateway API key (GATEWAY_API_KEYS); 'x-api-key: <key>' works too. Not needed in open mode.",
    )
}


@dataclass
class Access:
    keys: KeyRing
    limiter: RateLimiter


def presented_key(connection: ASGIConnection[Any, Any, Any, Any]) -> str | None:
    authorization = connection.headers.get("authorization", "")
    scheme, _, value = authorization.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    api_key = connection.headers.get("x-api-key", "").strip()
    return api_key or None


class RequireScope:
    """A controller's ``before_request`` hook admitting keys with ``scope`` (admin includes query) within their
    limits.

    Litestar runs one ``before_request`` hook per handler, the closest layer's: a handler or controller that sets
    its own would replace this check, not add to it. ``tests/unit/test_access.py`` checks that every route of the
    API resolves to it, and a route with Litestar's response cache must not use it (the cache is read before the
    hook runs; no route has one).
    """

    __slots__ = ("scope",)

    def __init__(self, scope: Scope) -> None:
        self.scope: Scope = scope

    async def __call__(self, connection: ASGIConnection[Any, Any, Any, Any]) -> None:
        """Returns None: a hook that returned a value would be answered with it instead of the handler's response."""
        access: Access = connection.app.state.access
        if access.keys.open:
            connection.state[PRINCIPAL] = ANONYMOUS
            return
        principal = identify(access.keys, presented_key(connection), self.scope)
        # Before the limiter counts the request: a key naming a user it may not is refused on every route, also on
        # those that read no documents, so a misconfigured caller learns of it wherever it first calls.
        check_vouched(principal, connection.headers)
        connection.state[PRINCIPAL] = await admit(access, principal)


def identify(keys: KeyRing, key: str | None, scope: Scope) -> Principal:
    """The presented key's principal, if it holds ``scope`` (a keyed app: open mode admits everyone)."""
    if key is None:
        raise AuthenticationError(
            "No API key: send it as 'Authorization: Bearer <key>' (or in the 'x-api-key' header)."
        )
    principal = keys.lookup(key)
    if principal is None:
        raise AuthenticationError("The API key is not valid.")
    if not principal.allows(scope):
        raise PermissionDeniedError(f"The API key {principal.name!r} lacks the {scope!r} scope for this endpoint.")
    return principal


async def admit(access: Access, principal: Principal) -> Principal:
    """``principal``, once its rate and daily token budget admit one more request."""
    decision = await access.limiter.admit(principal)
    if not decision.allowed:
        what = (
            f"{decision.limit} requests per minute"
            if decision.verdict == "requests"
            else f"its daily budget of {decision.limit} tokens"
        )
        raise RateLimitedError(
            f"The API key {principal.name!r} exceeded {what}; retry after {decision.retry_after_s} s.",
            retry_after_s=decision.retry_after_s,
            code="rate_limit_exceeded" if decision.verdict == "requests" else "daily_token_budget_exceeded",
        )
    return principal


def require(scope: Scope) -> RequireScope:
    """The ``before_request`` hook for a controller whose routes need ``scope``."""
    return RequireScope(scope)


def provide_principal(request: ASGIConnection[Any, Any, Any, Any]) -> Principal:
    principal: Principal = request.state.get(PRINCIPAL, ANONYMOUS)
    return principal


async def provide_reader(request: ASGIConnection[Any, Any, Any, Any]) -> Reader:
    """The ``reader`` dependency: who the request reads for (:mod:`gateway.access.identity`), put on its trace.
    The route's key check ran first and left the key's principal."""
    identity: Identity = request.app.state.identity
    reader = await identity.reader(provide_principal(request), request.headers)
    record(reader)
    return reader


def open_access(settings: AccessSettings, host: str, redis: ResilientRedis | None) -> Access:
    """Keys and limiter for the app lifespan; limits go to the app's shared Redis client when it has one.

    Refuses (``OpenAccessError``) to serve without keys on a public ``host`` before anything else.
    """
    check_exposure(settings, host)
    keys = KeyRing(settings.api_keys)
    limiter: RateLimiter
    if redis is not None:
        limiter = RedisRateLimiter(
            redis,
            prefix=settings.rate_limit_prefix,
            timeout_s=settings.rate_limit_timeout_s,
            fail_closed=settings.rate_limit_fail_closed,
        )
    else:
        if any(k.requests_per_minute or k.daily_tokens for k in settings.api_keys):
            logger.warning("rate limits and token budgets are enforced per process: no REDIS_URL to share them")
        limiter = LocalRateLimiter()
    return Access(keys, limiter)
