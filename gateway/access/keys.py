"""API keys: configured as SHA-256 digests, matched in constant time, mapped to a tenant.

Only digests are ever configured or kept in memory, so a leaked config or heap dump reveals no
usable key. Keys are high-entropy random strings (``new-key``), which is why a plain SHA-256 and
not a slow password hash is the right tool: there is nothing to brute-force. Lookup compares the
presented key's digest with every configured digest using ``hmac.compare_digest`` and does not
stop at the first match, so timing says nothing about which or how many keys exist.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import logging
import secrets
from dataclasses import dataclass
from typing import Literal

from gateway.errors import TenantForbiddenError
from gateway.settings import AccessSettings, ApiKeyConfig

logger = logging.getLogger(__name__)

Scope = Literal["query", "admin"]
OPEN_TENANT = "default"


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def new_key() -> str:
    """256 bits of randomness, prefixed so a leaked key is recognisable in secret scanners."""
    return "rgw-" + secrets.token_urlsafe(32)


@dataclass(frozen=True, slots=True)
class Principal:
    """The caller of one request. ``name`` (never the key) labels limits and logs."""

    name: str
    tenant: str
    scopes: frozenset[Scope]
    requests_per_minute: int | None = None
    daily_tokens: int | None = None
    authenticated: bool = True
    # May name the end user it asks for (gateway.access.identity): by a signed token, and by plain headers too.
    acts_for_users: bool = False
    trusts_user_headers: bool = False

    @property
    def limited(self) -> bool:
        """Whether a rate or a token budget applies: the limiters count nothing for a key without either."""
        return self.requests_per_minute is not None or self.daily_tokens is not None

    def allows(self, scope: Scope) -> bool:
        # admin is the superset: an ingestion key may also query what it ingested.
        return scope in self.scopes or "admin" in self.scopes

    def tenant_for(self, requested: str) -> str:
        """The tenant a request acts on: the key's. ``default`` means "not named" and becomes the key's
        tenant; naming any other tenant is refused (403) rather than silently ignored."""
        if not self.authenticated or requested in (OPEN_TENANT, self.tenant):
            return self.tenant if self.authenticated else requested
        raise TenantForbiddenError(
            f"This API key belongs to tenant {self.tenant!r}; it cannot act on tenant {requested!r}. "
            "Leave 'tenant' out or use a key of that tenant."
        )


# Open mode names any user it is told: everyone there is an admin already, who may read every document.
ANONYMOUS = Principal(
    name="anonymous",
    tenant=OPEN_TENANT,
    scopes=frozenset({"query", "admin"}),
    authenticated=False,
    acts_for_users=True,
    trusts_user_headers=True,
)


class KeyRing:
    def __init__(self, keys: list[ApiKeyConfig]) -> None:
        names = [k.name for k in keys]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"GATEWAY_API_KEYS: key names must be unique (limits are kept per name): {duplicates}")
        # Principals are immutable, so each key's is built once here rather than on every request.
        self._entries = [
            (
                bytes.fromhex(k.key_sha256.lower()),
                Principal(
                    name=k.name,
                    tenant=k.tenant,
                    scopes=frozenset(k.scopes),
                    requests_per_minute=k.requests_per_minute,
                    daily_tokens=k.daily_tokens,
                    acts_for_users=k.acts_for_users,
                    trusts_user_headers=k.trusts_user_headers,
                ),
            )
            for k in keys
        ]

    @property
    def open(self) -> bool:
        return not self._entries

    def named(self, name: str) -> tuple[str, Principal] | None:
        """The key called ``name``: a digest of its configured digest (what a signed-in session remembers, so a key
        replaced under the same name ends the sessions it opened) and its principal."""
        for configured, principal in self._entries:
            if principal.name == name:
                return hashlib.sha256(configured).hexdigest()[:32], principal
        return None

    def lookup(self, presented: str) -> Principal | None:
        digest = hashlib.sha256(presented.encode("utf-8")).digest()
        found: Principal | None = None
        for configured, principal in self._entries:
            if hmac.compare_digest(configured, digest):
                found = principal
        return found


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class OpenAccessError(RuntimeError):
    """No API keys while listening beyond loopback: refuse to start instead of exposing everything."""


def check_exposure(settings: AccessSettings, host: str, *, quiet: bool = False) -> None:
    """Start-up check: open mode (no keys) only on loopback unless ``allow_open_access`` says otherwise.

    ``quiet`` only refuses (the CLI checks before loading anything; the lifespan then logs the mode once).
    """
    bind = host
    if quiet and (settings.api_keys or is_loopback(bind) or settings.allow_open_access):
        return
    if settings.api_keys:
        logger.info("API keys required: %d key(s) configured", len(settings.api_keys))
        return
    if is_loopback(bind):
        logger.warning("OPEN ACCESS: no API keys configured (GATEWAY_API_KEYS); serving loopback %s only", bind)
        return
    if not settings.allow_open_access:
        raise OpenAccessError(
            f"Refusing to serve {bind} without API keys: set GATEWAY_API_KEYS (see `python -m gateway.access "
            "new-key`) or, on a network you trust, GATEWAY_ALLOW_OPEN_ACCESS=true."
        )
    logger.warning(
        "OPEN ACCESS on %s: no API keys configured and GATEWAY_ALLOW_OPEN_ACCESS=true; "
        "anyone who reaches this port can query and ingest documents",
        bind,
    )
