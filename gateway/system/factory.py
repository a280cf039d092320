"""The readiness probe's checks, from the clients the other domains opened."""

from __future__ import annotations

from typing import Any

import httpx
from pydantic import SecretStr

from gateway.access import Identity
from gateway.cache import ExactCache
from gateway.curation import CurationStore
from gateway.knowledge import KnowledgeBase
from gateway.platform import Platform
from gateway.providers import FALLBACK, PRIMARY, OpenAICompatibleEmbeddings, ping_llm
from gateway.settings import Settings
from gateway.system.service import Check, Readiness


def open_readiness(
    settings: Settings,
    platform: Platform,
    knowledge: KnowledgeBase,
    curation_store: CurationStore | None,
    identity: Identity,
    *,
    ping_primary: bool,
    answers: ExactCache[Any] | None = None,
) -> Readiness:
    """``ping_primary``: whether the primary model has an endpoint to ask (an injected test model has none)."""
    degradable = llm_checks(settings, platform, ping_primary=ping_primary)
    limit_s = settings.server.readiness_timeout_s
    if isinstance(platform.embeddings, OpenAICompatibleEmbeddings):  # a server of its own to ask
        degradable["embeddings"] = embeddings_check(platform.embeddings, platform.http, limit_s)
    if platform.redis is not None:
        degradable["redis"] = platform.redis.ping
    if curation_store is not None:
        degradable["curation_store"] = curation_store.ping
    signing_keys = identity.signing_keys
    if signing_keys is not None:  # degradable: only user tokens need the keys, and the provider serves every replica
        degradable["identity_provider"] = signing_keys.check
    return Readiness(
        required={"vector_store": knowledge.store.ping},
        degradable=degradable,
        llm=platform.llm,
        telemetry=platform.telemetry,
        timeout_s=settings.server.readiness_timeout_s,
        cache=platform.cache,
        answers=answers,
    )


def llm_checks(settings: Settings, platform: Platform, *, ping_primary: bool) -> dict[str, Check]:
    """Readiness of each LLM upstream: its breaker is not open, and its ``/models`` answers."""
    endpoint, limit = settings.llm_endpoint, settings.server.readiness_timeout_s
    targets = {"llm": (PRIMARY, endpoint.base_url, endpoint.api_key, ping_primary)}
    if endpoint.has_fallback:
        url, key = endpoint.fallback_base_url or endpoint.base_url, endpoint.fallback_api_key or endpoint.api_key
        targets["llm_fallback"] = (FALLBACK, url, key, True)

    def check_of(upstream: str, url: str, key: SecretStr, ping: bool) -> Check:
        async def check() -> None:
            platform.llm.check_breaker(upstream)
            if ping:
                await ping_llm(platform.http, url, key, limit)

        return check

    return {name: check_of(*target) for name, target in targets.items()}


def embeddings_check(embeddings: OpenAICompatibleEmbeddings, http: httpx.AsyncClient, limit_s: float) -> Check:
    """Readiness of an embeddings server: its breaker is not open, and its ``/models`` answers. Degradable, like the
    LLM: the server is shared by every replica, and while it is down cached answers are still served (a question's
    vector is looked up in the vector cache first) and the rest fail fast with a 503, not a refused connection."""

    async def check() -> None:
        embeddings.check_breaker()
        await embeddings.ping(http, limit_s)

    return check
