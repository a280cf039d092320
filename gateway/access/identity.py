"""Who is asking: the end user behind a calling key, learnt once per request and handed to handlers as a Reader.

A gateway key belongs to a chatbot backend, not to a person. A key marked ``acts_for_users`` may name the person it
asks for, in one of two ways:

- **a signed token** in ``X-Gateway-User-Token`` (``Authorization`` keeps carrying the API key): an OIDC JWT whose
  issuer, audience, expiry, not-before and issued-at (within a leeway) and signature PyJWT checks against the keys the
  identity provider publishes (its JWKS). The user is its ``sub`` (or the configured claim), their groups its
  ``groups``. Only asymmetric algorithms from the allow-list are accepted, each key bound to its own algorithm, so
  neither ``alg: none`` nor an HMAC "signed" with the provider's public key gets through.
- **trusted headers**, for a key also marked ``trusts_user_headers`` (an ingress such as oauth2-proxy signed the user
  in and set them): ``X-Gateway-User`` and ``X-Gateway-User-Groups`` (comma-separated). The headers prove nothing by
  themselves, so from any other key they are refused (403) rather than ignored: a caller that believes it narrowed
  what a user sees learns that it did not.

A request naming no user reads what is open to the whole tenant (``Visibility.tenant_only``); whether documents
ingested without ``access`` count as open is the tenant's policy (``GATEWAY_ACCESS_UNSET_DOCUMENTS`` for now), read
here, where every visibility is built.

A user's groups, from a token's claim or the trusted header alike, are read by one function (:func:`user_group`):
Keycloak's group-membership mapper sends full group paths ("/eng/platform"), whose leading "/" is dropped, so they
name the groups documents' ``access`` names ("eng/platform").

The signing keys are fetched with the app's httpx client (PyJWT's own ``PyJWKClient`` fetches with blocking urllib,
which would stall the event loop) and parsed by ``jwt.PyJWKSet``'s key class: once at start-up, then when they grow
old, a token names a key id not among them, or the readiness probe finds them old or missing, in every case at most
once per ``jwks_min_refetch_s``, so neither made-up key ids nor probes can make the gateway hammer the identity
provider.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit

import httpx
import jwt
from litestar.datastructures import Headers

from gateway.access.keys import Principal
from gateway.errors import ClientError, PermissionDeniedError, ProviderError, ProviderUnavailableError, UserTokenError
from gateway.observability import reader_known
from gateway.providers import NO_DEPENDENCY_EVENTS, DependencyEvents
from gateway.settings import ApiKeyConfig, IdentitySettings
from pipelines.shared import MAX_GROUP_CHARS, Visibility, is_group_name

logger = logging.getLogger(__name__)

TOKEN_HEADER = "x-gateway-user-token"
USER_HEADER = "x-gateway-user"
GROUPS_HEADER = "x-gateway-user-groups"
IDENTITY_PROVIDER = "identity_provider"

MAX_USER_ID_CHARS = 256
MAX_GROUPS = 512
MAX_KID_CHARS = 256
MAX_JWKS_BYTES = 1024 * 1024
# An RSA key published without ``alg`` may sign with any of these; an EC or OKP key's curve names its algorithm.
RSA_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512")

ReaderSource = Literal["token", "header", "none", "system"]


@dataclass(frozen=True, slots=True)
class Reader:
    """The person a request reads for, as far as the gateway could learn: their id (None: no user named), their
    groups, what they may see of the tenant's documents, and how they were learnt (``token``: an identity
    provider's signature; ``header``: the calling key's word; ``none``: not named)."""

    user_id: str | None
    groups: frozenset[str]
    visibility: Visibility
    source: ReaderSource

    @classmethod
    def unrestricted(cls) -> Reader:
        """The gateway's own maintenance reads (an admin's console, an offline evaluation): every document. Never
        made from a request's headers, only by code that acts for nobody."""
        return cls(None, frozenset(), Visibility.everything(), "system")


class IdentityConfigError(RuntimeError):
    """The identity provider is half configured: start-up stops instead of refusing every token later."""


# --- the identity provider's signing keys ---------------------------------------------------------------------

KeyIndex = dict[tuple[str | None, str], jwt.PyJWK]


def index_keys(document: object, algorithms: Sequence[str]) -> KeyIndex:
    """A JWKS document's signing keys by (key id, algorithm), for the allowed algorithms only. Keys for encryption,
    of another algorithm, or that do not parse are left out, as ``PyJWKSet`` leaves out unusable ones."""
    if not isinstance(document, dict) or not isinstance(document.get("keys"), list):
        raise ValueError("not a JWK Set: no 'keys' list")
    index: KeyIndex = {}
    for member in document["keys"]:
        if not isinstance(member, dict) or member.get("use", "sig") != "sig":
            continue
        kid = member.get("kid")
        if kid is not None and not isinstance(kid, str):
            continue
        named = member.get("alg")
        candidates: Sequence[str | None]
        if isinstance(named, str):
            candidates = [named]
        elif member.get("kty") == "RSA":
            candidates = RSA_ALGORITHMS
        else:
            candidates = [None]  # PyJWK reads the algorithm from the curve
        for algorithm in candidates:
            if algorithm is not None and algorithm not in algorithms:
                continue
            try:
                key = jwt.PyJWK(member, algorithm=algorithm)
            except (jwt.PyJWTError, ValueError, TypeError, KeyError):
                continue
            if key.algorithm_name in algorithms:
                index.setdefault((kid, key.algorithm_name), key)
    return index


class SigningKeys:
    """The identity provider's published keys, fetched once before the gateway serves (:meth:`prefetch`) and again
    when they are older than ``jwks_max_age_s`` or a token names one not among them, never more than once per
    ``jwks_min_refetch_s``, whoever asks: a token, the start-up or the readiness probe (:meth:`check`).

    One fetch at a time (a lock; asyncio's single thread makes the rest atomic): requests that need a fetch while
    one is on its way wait for it and read its result. A failed fetch keeps the keys already known (the provider
    being down must not log every user out); with none known, the request is a 503. Each failure is logged, and the
    provider going down or coming back is reported once per transition (``events``: the app's telemetry counts it
    as ``identity_provider``, as it counts Redis).
    """

    def __init__(
        self,
        http: httpx.AsyncClient,
        settings: IdentitySettings,
        *,
        clock: Callable[[], float] = time.monotonic,
        events: DependencyEvents = NO_DEPENDENCY_EVENTS,
    ) -> None:
        if not settings.jwks_url:
            raise IdentityConfigError("GATEWAY_IDENTITY_JWKS_URL is not set")
        self._http = http
        self._url = settings.jwks_url
        # Where the keys come from, for logs and the readiness body: host and port, never credentials or the path.
        self._host = urlsplit(settings.jwks_url).netloc.rpartition("@")[2]
        self._algorithms = tuple(settings.algorithms)
        self._timeout_s = settings.jwks_timeout_s
        self._max_age_s = settings.jwks_max_age_s
        self._min_refetch_s = settings.jwks_min_refetch_s
        self._clock = clock
        self._events = events
        self._keys: KeyIndex = {}
        self._fetched_at: float | None = None  # the last fetch that succeeded
        self._tried_at: float | None = None  # the last fetch tried, whatever came of it
        self._failure: str | None = None  # why the last fetch tried failed; None: it succeeded (or none was tried)
        self._up = True  # as Redis is taken to be: the first failed fetch is the provider going down
        self._lock = asyncio.Lock()
        # Refreshes a readiness probe started: kept until done, so a probe timing out never cancels (or loses) one.
        self._probing: set[asyncio.Task[None]] = set()

    async def key(self, kid: str | None, algorithm: str) -> jwt.PyJWK:
        wanted = (kid, algorithm)
        if wanted not in self._keys or not self._fresh():
            async with self._lock:
                # Another request may have fetched while this one waited.
                if (wanted not in self._keys or not self._fresh()) and self._may_fetch():
                    await self._refresh()
        found = self._keys.get(wanted)
        if found is not None:
            return found
        if self._fetched_at is None:
            raise ProviderUnavailableError(
                "No user token can be verified: the identity provider's signing keys could not be fetched. "
                + (self._failure or "No fetch has finished yet."),
                provider=IDENTITY_PROVIDER,
            )
        named = f"key id {kid!r}" if kid is not None else "no key id"
        raise UserTokenError(
            f"The user token is signed ({algorithm}, {named}) with a key the identity provider does not publish."
        )

    async def prefetch(self) -> None:
        """The keys fetched before the gateway serves, so the first user's request does not wait for them and a
        provider that cannot be reached shows in the start-up's log. A failure does not stop the start: requests
        naming no user never need the keys, and the next one that does fetches again (once per interval)."""
        await self._refresh_if_due()

    async def check(self) -> None:
        """Readiness: passes while keys are known and fresh; else raises a provider error saying where they come
        from and what went wrong (degradable: the gateway answers without them, except user tokens). Old or missing
        keys are fetched first if the interval allows, so an idle gateway keeps its keys fresh and one whose
        provider came back recovers without a user's request; a probe never fetches more often than a token can."""
        if not self._fresh() and self._may_fetch():
            # Shielded: the probe's own timeout may end the wait, never the fetch, which requests may be waiting on.
            task = asyncio.ensure_future(self._refresh_if_due())
            self._probing.add(task)
            task.add_done_callback(self._probing.discard)
            await asyncio.shield(task)
        elif not self._fresh() and self._lock.locked():
            # A fetch a token started is under way: the probe reports its outcome, not that it has not ended yet.
            async with self._lock:
                pass
        if self._fresh():
            return
        reason = self._failure or f"not fetched again yet (at most once per {self._min_refetch_s:g} s)"
        if self._fetched_at is None:
            raise ProviderUnavailableError(f"No signing keys from {self._host}: {reason}", provider=IDENTITY_PROVIDER)
        age_s = self._clock() - self._fetched_at
        raise ProviderUnavailableError(
            f"Signing keys from {self._host} are {age_s:.0f} s old (kept for {self._max_age_s:g} s): {reason}",
            provider=IDENTITY_PROVIDER,
        )

    def _fresh(self) -> bool:
        return self._fetched_at is not None and self._clock() - self._fetched_at < self._max_age_s

    def _may_fetch(self) -> bool:
        return self._tried_at is None or self._clock() - self._tried_at >= self._min_refetch_s

    async def _refresh_if_due(self) -> None:
        async with self._lock:
            if not self._fresh() and self._may_fetch():
                await self._refresh()

    async def _refresh(self) -> None:
        """One fetch; its outcome is recorded, never raised: the caller reads the keys (or their absence)."""
        self._tried_at = self._clock()
        try:
            keys = await self._fetch()
        except ProviderError as exc:
            self._failure = exc.detail
            if self._fetched_at is None:
                logger.warning(
                    "identity provider keys not fetched from %s (%s): user tokens are refused (503) until a fetch "
                    "succeeds, tried again at most once per %g s",
                    self._host,
                    exc.detail,
                    self._min_refetch_s,
                )
            else:
                logger.warning(
                    "identity provider keys not refreshed from %s (%s); keeping the %d known",
                    self._host,
                    exc.detail,
                    len(self._keys),
                )
            self._report(up=False)
            return
        self._keys = keys
        self._fetched_at = self._clock()
        self._failure = None
        logger.info("identity provider keys fetched from %s: %d usable", self._host, len(keys))
        self._report(up=True)

    def _report(self, *, up: bool) -> None:
        """The provider going down (the first failure after a success, or at the first fetch) or coming back."""
        if up != self._up:
            self._up = up
            self._events.dependency_changed(IDENTITY_PROVIDER, up)

    async def _fetch(self) -> KeyIndex:
        """One GET of the JWKS; whatever goes wrong becomes the gateway's provider error, here at the boundary."""
        try:
            response = await self._http.get(self._url, timeout=self._timeout_s, headers={"Accept": "application/json"})
        except httpx.TimeoutException as exc:
            raise ProviderUnavailableError(
                f"The identity provider's JWKS did not answer within {self._timeout_s} s.", provider=IDENTITY_PROVIDER
            ) from exc
        except httpx.HTTPError as exc:
            raise ProviderUnavailableError(
                f"The identity provider's JWKS could not be reached ({type(exc).__name__}).",
                provider=IDENTITY_PROVIDER,
            ) from exc
        if response.status_code != 200:
            raise ProviderUnavailableError(
                f"The identity provider's JWKS answered {response.status_code}.", provider=IDENTITY_PROVIDER
            )
        if len(response.content) > MAX_JWKS_BYTES:
            raise ProviderError("The identity provider's JWKS is implausibly large.", provider=IDENTITY_PROVIDER)
        try:
            keys = index_keys(response.json(), self._algorithms)
        except ValueError as exc:  # json.JSONDecodeError is one
            raise ProviderError(
                f"The identity provider's JWKS is not a JWK Set: {exc}", provider=IDENTITY_PROVIDER
            ) from exc
        if not keys:
            raise ProviderError(
                f"The identity provider's JWKS has no signing key for {', '.join(self._algorithms)}.",
                provider=IDENTITY_PROVIDER,
            )
        return keys


# --- tokens -------------------------------------------------------------------------------------------------


class TokenVerifier:
    """An end user's OIDC token -> their id and groups, or a 401 saying what was wrong with it."""

    def __init__(self, settings: IdentitySettings, keys: SigningKeys) -> None:
        if not (settings.issuer and settings.audience):
            raise IdentityConfigError("GATEWAY_IDENTITY_ISSUER and GATEWAY_IDENTITY_AUDIENCE must both be set")
        self._issuer = settings.issuer
        self._audience = settings.audience
        self._algorithms = tuple(settings.algorithms)
        self._user_claim = settings.user_claim
        self._groups_claim = settings.groups_claim
        self._leeway_s = settings.leeway_s
        self._keys = keys

    @property
    def keys(self) -> SigningKeys:
        return self._keys

    async def verify(self, token: str) -> tuple[str, frozenset[str]]:
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as exc:
            raise UserTokenError(f"The user token is not a signed JWT ({exc}).") from exc
        algorithm = header.get("alg")
        # Checked before any key is looked up, so a token of a refused kind never makes the keys be fetched.
        if algorithm not in self._algorithms:
            raise UserTokenError(
                f"The user token's algorithm {algorithm!r} is not accepted; use one of {', '.join(self._algorithms)}."
            )
        kid = header.get("kid")
        if kid is not None and (not isinstance(kid, str) or len(kid) > MAX_KID_CHARS):
            raise UserTokenError("The user token's key id ('kid') is not a short string.")
        key = await self._keys.key(kid, algorithm)
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key,
                algorithms=[algorithm],
                audience=self._audience,
                issuer=self._issuer,
                leeway=self._leeway_s,
                options={"require": ["exp", "iss", "aud", self._user_claim]},
            )
        except jwt.ExpiredSignatureError as exc:
            raise UserTokenError("The user token has expired.") from exc
        except jwt.ImmatureSignatureError as exc:
            raise UserTokenError("The user token is not valid yet (nbf or iat lies in the future).") from exc
        except jwt.InvalidAudienceError as exc:
            raise UserTokenError(f"The user token is not for this gateway (audience {self._audience!r}).") from exc
        except jwt.InvalidIssuerError as exc:
            raise UserTokenError(f"The user token was not issued by {self._issuer!r}.") from exc
        except jwt.MissingRequiredClaimError as exc:
            raise UserTokenError(f"The user token has no {exc.claim!r} claim.") from exc
        except jwt.InvalidSignatureError as exc:
            raise UserTokenError("The user token's signature does not verify.") from exc
        except jwt.PyJWTError as exc:
            raise UserTokenError(f"The user token is not valid ({exc}).") from exc
        return self._user_of(claims), self._groups_of(claims)

    def _user_of(self, claims: dict[str, Any]) -> str:
        user = claims.get(self._user_claim)
        if not isinstance(user, str) or not user.strip() or len(user) > MAX_USER_ID_CHARS:
            raise UserTokenError(
                f"The user token's {self._user_claim!r} claim must be a user id of 1 to {MAX_USER_ID_CHARS} characters."
            )
        return user

    def _groups_of(self, claims: dict[str, Any]) -> frozenset[str]:
        """The token's groups, read by :func:`user_group` (a Keycloak group path's leading "/" dropped). None named:
        no groups (the reader sees what is open to the tenant). Names no document could name (a reserved "*" or "~"
        first, also after the "/", other characters) are the provider's, not a forgery: they are left out rather
        than refusing the user."""
        raw = claims.get(self._groups_claim)
        if raw is None:
            return frozenset()
        names = [raw] if isinstance(raw, str) else raw
        if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
            raise UserTokenError(f"The user token's {self._groups_claim!r} claim must be a list of group names.")
        if len(names) > MAX_GROUPS:
            raise UserTokenError(f"The user token names {len(names)} groups; at most {MAX_GROUPS} are read.")
        return frozenset(group for group in map(user_group, names) if group is not None)


def user_group(name: str) -> str | None:
    """A user's group as an identity source names it -> the group documents' ``access`` names, or None when no
    document could name it (:func:`~pipelines.shared.visibility.is_group_name`). Every reader of a user's groups
    goes through it: a token's claim, the trusted header, an evaluation suite's ``run_as``.

    Keycloak's group-membership mapper sends full paths by default ("/eng", "/eng/platform"): their one leading "/"
    is the root of the path, not part of a name, so "/eng/platform" is the group "eng/platform". Only one is
    removed: "//eng" is no group path, and the rule still holds after it, so "/*" and "/~" name no group."""
    bare = name[1:] if name.startswith("/") else name
    return bare if is_group_name(bare) else None


# --- the reader of a request ----------------------------------------------------------------------------------


def check_vouched(principal: Principal, headers: Headers) -> None:
    """Refuses (403) a user named by a key that may not name one: a token from a key not acting for users, the
    plain user headers from a key not trusting them. Run by every API route's key check, so no route ignores them."""
    if TOKEN_HEADER in headers and not principal.acts_for_users:
        raise PermissionDeniedError(
            f"The API key {principal.name!r} does not act for users, so it may not name one "
            "(X-Gateway-User-Token): mark it acts_for_users or leave the header out.",
            code="key_does_not_act_for_users",
        )
    if (USER_HEADER in headers or GROUPS_HEADER in headers) and not principal.trusts_user_headers:
        raise PermissionDeniedError(
            f"The API key {principal.name!r} is not trusted to name users in plain headers "
            "(X-Gateway-User, X-Gateway-User-Groups): send a signed user token (X-Gateway-User-Token) instead, "
            "or mark the key trusts_user_headers if an ingress that signs users in sets them.",
            code="user_headers_not_trusted",
        )


class Identity:
    """The one place a request's :class:`Reader` is made: from the key's principal and the request's headers."""

    def __init__(self, settings: IdentitySettings, verifier: TokenVerifier | None) -> None:
        self._unset_open = settings.unset_documents == "open"
        self._verifier = verifier
        self.nobody = Reader(None, frozenset(), Visibility.tenant_only(unset_open=self._unset_open), "none")

    @property
    def verifies_tokens(self) -> bool:
        return self._verifier is not None

    @property
    def signing_keys(self) -> SigningKeys | None:
        """The identity provider's keys (None: no provider configured), for the start-up and readiness."""
        return self._verifier.keys if self._verifier is not None else None

    async def prefetch_keys(self) -> None:
        """Start-up: the provider's keys fetched once before serving (:meth:`SigningKeys.prefetch`; a failure is
        logged, never raised). Nothing to do without a provider."""
        if self._verifier is not None:
            await self._verifier.keys.prefetch()

    def of(self, user_id: str, groups: frozenset[str], source: ReaderSource) -> Reader:
        return Reader(user_id, groups, Visibility.of(groups, unset_open=self._unset_open), source)

    async def of_token(self, token: str) -> Reader:
        """The user a token names, verified (401 when it does not verify, or when no provider is configured): the
        ``X-Gateway-User-Token`` header's, or the one a console session signed in with, checked again each request
        so that its expiry and the provider's key rotation end what the session may read."""
        if self._verifier is None:
            raise UserTokenError(
                "This gateway verifies no user tokens: no identity provider is configured "
                "(GATEWAY_IDENTITY_ISSUER, GATEWAY_IDENTITY_AUDIENCE, GATEWAY_IDENTITY_JWKS_URL)."
            )
        user_id, groups = await self._verifier.verify(_bare(token))
        return self.of(user_id, groups, "token")

    @staticmethod
    def header_user(headers: Headers) -> str | None:
        """The user the trusted ``X-Gateway-User`` header names, as :meth:`reader` reads it (None: no header)."""
        user = _single(headers, USER_HEADER)
        return None if user is None else _header_user(user)

    async def reader(self, principal: Principal, headers: Headers) -> Reader:
        check_vouched(principal, headers)
        token = _single(headers, TOKEN_HEADER)
        user = _single(headers, USER_HEADER)
        groups = _single(headers, GROUPS_HEADER)
        if token is not None:
            if user is not None or groups is not None:
                raise ClientError(
                    "Name the user once: a user token (X-Gateway-User-Token) or the user headers "
                    "(X-Gateway-User, X-Gateway-User-Groups), not both.",
                    code="user_named_twice",
                )
            return await self.of_token(token)
        if user is None and groups is None:
            return self.nobody
        if user is None:
            raise ClientError("X-Gateway-User-Groups names groups but X-Gateway-User names no user.", code="no_user")
        return self.of(_header_user(user), _header_groups(groups or ""), "header")


def for_openai_user(reader: Reader, user: str | None, principal: Principal) -> Reader:
    """The reader once OpenAI chat's ``user`` field is read. A token's subject wins: a different ``user`` is a 403;
    so is one other than the trusted ``X-Gateway-User``. Without either, a key trusting user headers may name the
    user in the field (with no groups: they come in the header). From any other key the field stays what OpenAI
    made it, an opaque label for the provider's abuse monitoring: it names nobody and narrows nothing."""
    if not user:
        return reader
    if reader.source != "none":
        if user != reader.user_id:
            via = "user token" if reader.source == "token" else "X-Gateway-User header"
            raise PermissionDeniedError(
                f"The 'user' field names another user than the {via}; leave it out or send the same id.",
                field="user",
                code="user_mismatch",
            )
        return reader
    if not principal.trusts_user_headers:
        return reader
    # No groups: the tenant-open visibility the request already had (with the tenant's policy for unset access).
    named = Reader(_header_user(user, field="user"), frozenset(), reader.visibility, "header")
    record(named)
    return named


def _bare(token: str) -> str:
    """The token, also when sent the way ``Authorization`` carries one (``Bearer <token>``)."""
    scheme, _, rest = token.strip().partition(" ")
    return rest.strip() if scheme.lower() == "bearer" and rest.strip() else token.strip()


def _single(headers: Headers, name: str) -> str | None:
    values = headers.getall(name, [])
    if len(values) > 1:
        raise ClientError(f"The {name} header is sent {len(values)} times; send it once.", code="header_repeated")
    return values[0] if values else None


def _header_user(value: str, *, field: str = "X-Gateway-User") -> str:
    user = value.strip()
    if not user or len(user) > MAX_USER_ID_CHARS:
        raise ClientError(f"{field} must name a user id of 1 to {MAX_USER_ID_CHARS} characters.", code="bad_user")
    return user


def _header_groups(value: str) -> frozenset[str]:
    """The trusted header's groups, each read by :func:`user_group` as a token's are; one that names no group is a
    400, not left out: the ingress setting the header is the gateway's to configure, and should learn of it."""
    names = [name.strip() for name in value.split(",")]
    names = [name for name in names if name]
    if len(names) > MAX_GROUPS:
        raise ClientError(f"X-Gateway-User-Groups names {len(names)} groups; at most {MAX_GROUPS}.", code="bad_groups")
    groups: set[str] = set()
    for name in names:
        group = user_group(name)
        if group is None:
            raise ClientError(
                f"X-Gateway-User-Groups: {name[:40]!r} is not a group name (1 to {MAX_GROUP_CHARS} letters, digits, "
                "'_', '-', '.', ':' or '/', starting with a letter or a digit: the rule documents' access obeys; "
                "a group path's one leading '/' is dropped).",
                code="bad_groups",
            )
        groups.add(group)
    return frozenset(groups)


def record(reader: Reader) -> None:
    """The reader on the request's trace: who asked and the digest of what they may see."""
    reader_known(reader.user_id, reader.visibility.key(), reader.source)


def open_identity(
    settings: IdentitySettings,
    http: httpx.AsyncClient,
    api_keys: Sequence[ApiKeyConfig],
    *,
    events: DependencyEvents = NO_DEPENDENCY_EVENTS,
) -> Identity:
    """The app's identity component. Identity provider settings are all or nothing (start-up stops on a half
    configured one); keys that can name users only by token, without a provider to verify it, are logged.
    ``events``: where the provider going down or coming back is reported (the app's telemetry)."""
    configured = [settings.issuer, settings.audience, settings.jwks_url]
    if any(configured) and not all(configured):
        raise IdentityConfigError(
            "User tokens need all of GATEWAY_IDENTITY_ISSUER, GATEWAY_IDENTITY_AUDIENCE and GATEWAY_IDENTITY_JWKS_URL"
        )
    if settings.jwks_url and not settings.jwks_url.startswith(("https://", "http://")):
        raise IdentityConfigError(f"GATEWAY_IDENTITY_JWKS_URL must be an http(s) URL, not {settings.jwks_url!r}")
    verifier = TokenVerifier(settings, SigningKeys(http, settings, events=events)) if all(configured) else None
    if verifier is None:
        token_only = sorted(k.name for k in api_keys if k.acts_for_users and not k.trusts_user_headers)
        if token_only:
            logger.warning(
                "keys %s act for users but no identity provider is configured: their user tokens are refused (401)",
                ", ".join(token_only),
            )
    return Identity(settings, verifier)
