"""Who is signed in to the console, and how a browser proves it.

A browser cannot send the API's ``Authorization`` header from a link or a form, so the console signs a person in
once: the key (or, in open mode, the tenant) is entered in a form and checked like any API key, and the session
remembers the key's *name* and a digest of its configured digest, never the key. The session lives in an
encrypted cookie (Litestar's client-side session backend, AES-GCM), HttpOnly, SameSite=Strict and scoped to
``/console``; every form and upload also carries a CSRF token (Litestar's CSRF middleware, double-submit) so
another site can never post as the signed-in person. A key removed or replaced under the same name ends its
sessions at their next request. Requests that present a key in a header (an authenticating proxy, a script) are
checked exactly as the API checks them.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass
from typing import Any

from litestar.config.csrf import CSRFConfig
from litestar.connection import ASGIConnection
from litestar.middleware.session.client_side import CookieBackendConfig

from gateway.access.guard import PRINCIPAL, Access, admit, identify, presented_key
from gateway.access.keys import KeyRing, Principal, Scope, is_loopback
from gateway.errors import AuthenticationError, ClientError, PermissionDeniedError
from gateway.providers import TENANT_PATTERN
from gateway.settings import ConsoleSettings

CONSOLE_PATH = "/console"
SESSION_COOKIE = "gateway_console"
CSRF_COOKIE = "gateway_console_csrf"
CSRF_HEADER = "x-csrftoken"
_TENANT = re.compile(TENANT_PATTERN)


class SignInRequiredError(AuthenticationError):
    """No session and no key: a page asks the browser to sign in (a redirect), anything else answers 401."""


@dataclass(frozen=True, slots=True)
class ConsoleCookies:
    """The session and CSRF cookies' settings, made once from the console's settings group and the bind address."""

    session: CookieBackendConfig
    csrf: CSRFConfig


def console_cookies(settings: ConsoleSettings, host: str) -> ConsoleCookies:
    """Both keys are derived from one secret; unset, a per-process one (sessions end with the process)."""
    raw = settings.secret.get_secret_value() if settings.secret is not None else secrets.token_urlsafe(32)
    secure = settings.secure_cookies if settings.secure_cookies is not None else not is_loopback(host)
    session = CookieBackendConfig(
        secret=hashlib.sha256(b"console-session:" + raw.encode()).digest(),
        key=SESSION_COOKIE,
        max_age=settings.session_max_age_s,
        path=CONSOLE_PATH,
        secure=secure,
        httponly=True,
        samesite="strict",
        # App-level (Litestar deep-copies a router's middleware, and the cipher cannot be copied): every path but
        # the console's passes by without reading a cookie.
        exclude=rf"^/(?!{CONSOLE_PATH.strip('/')}(/|$)).+",
    )
    csrf = CSRFConfig(
        secret=hashlib.sha256(b"console-csrf:" + raw.encode()).hexdigest(),
        cookie_name=CSRF_COOKIE,
        cookie_path=CONSOLE_PATH,
        header_name=CSRF_HEADER,
        cookie_secure=secure,
        cookie_httponly=True,  # pages carry the token themselves; scripts never read the cookie
        cookie_samesite="strict",
    )
    return ConsoleCookies(session, csrf)


def session_for_key(keys: KeyRing, key: str) -> dict[str, str]:
    """What a session remembers of a valid key; an invalid one is refused as the API refuses it."""
    principal = keys.lookup(key.strip())
    if principal is None:
        raise AuthenticationError("That key is not valid.")
    named = keys.named(principal.name)
    if named is None:  # lookup and named read the same entries
        raise AuthenticationError("That key is not valid.")
    return {"key": principal.name, "fingerprint": named[0]}


def session_for_tenant(tenant: str) -> dict[str, str]:
    """Open mode (no keys configured, loopback only): the session names the tenant to act on."""
    tenant = tenant.strip() or "default"
    if not _TENANT.fullmatch(tenant):
        raise ClientError(f"{tenant!r} is not a tenant name: letters, digits, '_' or '-', up to 64.")
    return {"tenant": tenant}


def session_principal(keys: KeyRing, session: dict[str, Any]) -> Principal | None:
    """The signed-in principal, or None when there is no session or its key is gone or was replaced."""
    if keys.open:
        tenant = session.get("tenant")
        if not isinstance(tenant, str) or not _TENANT.fullmatch(tenant):
            return None
        return Principal(name="console", tenant=tenant, scopes=frozenset({"query", "admin"}))
    name, fingerprint = session.get("key"), session.get("fingerprint")
    named = keys.named(name) if isinstance(name, str) else None
    if named is None or not secrets.compare_digest(named[0], str(fingerprint)):
        return None
    return named[1]


class ConsoleAccess:
    """The console's ``before_request`` hook: the session's principal (or a presented key's), with ``scope``, within
    its limits, stored where the ``principal`` dependency reads it, as the API's hook does."""

    __slots__ = ("scope",)

    def __init__(self, scope: Scope) -> None:
        self.scope: Scope = scope

    async def __call__(self, connection: ASGIConnection[Any, Any, Any, Any]) -> None:
        access: Access = connection.app.state.access
        key = presented_key(connection)
        if key is not None and not access.keys.open:
            principal = identify(access.keys, key, self.scope)
        else:
            signed_in = session_principal(access.keys, connection.session)
            if signed_in is None:
                raise SignInRequiredError("Sign in to the console first.")
            if not signed_in.allows(self.scope):
                raise PermissionDeniedError(f"The key {signed_in.name!r} lacks the {self.scope!r} scope for this page.")
            principal = signed_in
        connection.state[PRINCIPAL] = await admit(access, principal)
