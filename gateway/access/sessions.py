"""Who is signed in to the console, and how a browser proves it.

A browser cannot send the API's ``Authorization`` header from a link or a form, so the console signs a person in
once: the key (or, in open mode, the tenant) is entered in a form and checked like any API key, and the session
remembers the key's *name* and a digest of its configured digest, never the key. The session lives in an
encrypted cookie (Litestar's client-side session backend, AES-GCM), HttpOnly, SameSite=Strict and scoped to
``/console``; every form and upload also carries a CSRF token (Litestar's CSRF middleware, double-submit) so
another site can never post as the signed-in person. A key removed or replaced under the same name ends its
sessions at their next request. Requests that present a key in a header (an authenticating proxy, a script) are
checked exactly as the API checks them.

Who the console reads for is learnt the two ways the API learns it (:mod:`gateway.access.identity`), once per
request, in the same hook that admits the principal:

- a key acting for users may sign in with the user's OIDC token as well: the session keeps the token (the cookie
  is encrypted; Litestar splits a long one over several cookies) and every request verifies it again, so the
  token's expiry and the identity provider's key rotation end what the session may read, as they end an API
  caller's. A token that no longer verifies ends the session: sign in again.
- a key trusting user headers (an ingress such as oauth2-proxy in front of the console) sends ``X-Gateway-User``
  and ``X-Gateway-User-Groups`` on every request; from any other key they are the API's 403.

An admin naming no user reads every document (the console is where admins look after the whole knowledge base); a
principal naming a user reads as that user (an admin too: it previews what the user sees); a query key naming
nobody reads what is open to the whole tenant, as on the API.
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
from gateway.access.identity import GROUPS_HEADER, TOKEN_HEADER, Identity, Reader, check_vouched, record
from gateway.access.keys import KeyRing, Principal, Scope, is_loopback
from gateway.errors import AuthenticationError, ClientError, PermissionDeniedError, UserTokenError
from gateway.providers import TENANT_PATTERN
from gateway.settings import ConsoleSettings

CONSOLE_PATH = "/console"
SESSION_COOKIE = "gateway_console"
CSRF_COOKIE = "gateway_console_csrf"
CSRF_HEADER = "x-csrftoken"
READER = "console_reader"  # where the hook leaves the request's reader for the ``reader`` dependency
USER_TOKEN = "user_token"  # the session's user token, when it signed in with one
# A JWT with a long groups claim is a few KB; past this the form was not given a token.
MAX_USER_TOKEN_CHARS = 16384
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


async def session_for_key(keys: KeyRing, identity: Identity, key: str, user_token: str = "") -> dict[str, str]:
    """What a session remembers of a valid key (an invalid one is refused as the API refuses it) and, when given,
    of the user token it reads for: verified now (a bad one is the API's 401, and no session), kept to be verified
    again on every request."""
    principal = keys.lookup(key.strip())
    if principal is None:
        raise AuthenticationError("That key is not valid.")
    named = keys.named(principal.name)
    if named is None:  # lookup and named read the same entries
        raise AuthenticationError("That key is not valid.")
    session = {"key": principal.name, "fingerprint": named[0]}
    token = user_token.strip()
    if token:
        if not principal.acts_for_users:
            raise PermissionDeniedError(
                f"The key {principal.name!r} does not act for users, so it may not sign in with a user token: "
                "leave the token out, or mark the key acts_for_users.",
                code="key_does_not_act_for_users",
            )
        if len(token) > MAX_USER_TOKEN_CHARS:
            raise UserTokenError(f"The user token is longer than {MAX_USER_TOKEN_CHARS} characters.")
        await identity.of_token(token)
        session[USER_TOKEN] = token
    return session


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
        # Open mode names any user it is told, as the API's open mode does: everyone there is an admin already.
        return Principal(
            name="console",
            tenant=tenant,
            scopes=frozenset({"query", "admin"}),
            acts_for_users=True,
            trusts_user_headers=True,
        )
    name, fingerprint = session.get("key"), session.get("fingerprint")
    named = keys.named(name) if isinstance(name, str) else None
    if named is None or not secrets.compare_digest(named[0], str(fingerprint)):
        return None
    return named[1]


class ConsoleAccess:
    """The console's ``before_request`` hook: the session's principal (or a presented key's), with ``scope``, within
    its limits, stored where the ``principal`` dependency reads it, as the API's hook does; and whom the request reads
    for, stored where the console's ``reader`` dependency reads it (:func:`provide_console_reader`)."""

    __slots__ = ("scope",)

    def __init__(self, scope: Scope) -> None:
        self.scope: Scope = scope

    async def __call__(self, connection: ASGIConnection[Any, Any, Any, Any]) -> None:
        access: Access = connection.app.state.access
        key = presented_key(connection)
        session_token: str | None = None
        if key is not None and not access.keys.open:
            principal = identify(access.keys, key, self.scope)
        else:
            signed_in = session_principal(access.keys, connection.session)
            if signed_in is None:
                raise SignInRequiredError("Sign in to the console first.")
            if not signed_in.allows(self.scope):
                raise PermissionDeniedError(f"The key {signed_in.name!r} lacks the {self.scope!r} scope for this page.")
            principal = signed_in
            kept = connection.session.get(USER_TOKEN)
            session_token = kept if isinstance(kept, str) else None
        # Before the limiter counts the request, as on the API: a key naming a user it may not is refused.
        check_vouched(principal, connection.headers)
        connection.state[PRINCIPAL] = await admit(access, principal)
        reader = await console_reader(connection, principal, session_token)
        record(reader)
        connection.state[READER] = reader


async def console_reader(
    connection: ASGIConnection[Any, Any, Any, Any], principal: Principal, session_token: str | None
) -> Reader:
    """Whom a console request reads for: the session's user token (verified again), else the request's headers as
    the API reads them; then the console's rule for a principal naming nobody (an admin: every document)."""
    identity: Identity = connection.app.state.identity
    if session_token is None:
        named = await identity.reader(principal, connection.headers)
    else:
        headers = connection.headers
        if not principal.acts_for_users:
            connection.clear_session()
            raise SignInRequiredError(
                f"The key {principal.name!r} no longer acts for users, so this session's user token is not read: "
                "sign in again."
            )
        try:
            named = await identity.of_token(session_token)
        except UserTokenError as exc:
            connection.clear_session()
            raise SignInRequiredError(f"{exc.detail} Sign in again.", code="invalid_user_token") from exc
        # An ingress that authenticates users itself (oauth2-proxy) names the user on every request, the console's
        # too: naming the token's own user is no conflict (the token's verified groups stand); another user, a
        # second token, or groups for nobody are.
        header_user = identity.header_user(headers)
        named_by_headers = header_user is not None or GROUPS_HEADER in headers
        if TOKEN_HEADER in headers or (named_by_headers and header_user != named.user_id):
            raise ClientError(
                "This session signed in with a user token; headers may name only that user as well.",
                code="user_named_twice",
            )
    if named.user_id is None and principal.allows("admin"):
        return Reader.unrestricted()
    return named


def provide_console_reader(request: ASGIConnection[Any, Any, Any, Any]) -> Reader:
    """The console's ``reader`` dependency: what :class:`ConsoleAccess` learnt. A handler without that hook has no
    reader, and reads nothing."""
    reader = request.state.get(READER)
    if not isinstance(reader, Reader):
        raise SignInRequiredError("Sign in to the console first.")
    return reader
