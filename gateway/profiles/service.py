"""Profiles on the request path: read once per tenant and kept in-process for ``GATEWAY_PROFILE_CACHE_TTL_S``,
and the chat client of each model a profile names, built once per model name.

A request never waits on the database for a profile read less than the TTL ago: a cold or expired tenant
costs one read, shared by every request that needs it meanwhile (single flight). A store that fails or is
slower than ``GATEWAY_PROFILE_LOAD_TIMEOUT_S`` keeps the last profile known (else the default one) for
another TTL: answers keep flowing, as with the curation store's other uses, and the outage is logged.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from langchain_core.language_models import BaseChatModel

from gateway.errors import ProviderUnavailableError
from gateway.profiles.model import AssistantProfile, default_profile
from gateway.profiles.store import ProfileStore
from gateway.providers import LLMClient
from gateway.settings import AssistantSettings, LLMEndpointSettings, ProfileSettings
from pipelines.shared import ChatClient
from routes.table import RunProfile
from routes.types import Route

logger = logging.getLogger(__name__)


class ModelPool:
    """One chat client per model name, built on first use and kept: a ``ChatOpenAI`` per request would cost a
    client construction each time. Names are bounded by what admins configure (and ``allowed_models``)."""

    def __init__(
        self, default: LLMClient, build: Callable[[str], BaseChatModel], endpoint: LLMEndpointSettings
    ) -> None:
        self._default = default
        self._build = build
        self._endpoint = endpoint
        self._clients: dict[str, LLMClient] = {default.model_name: default}

    def client(self, model: str) -> LLMClient:
        found = self._clients.get(model)
        if found is None:
            found = self._default.with_model(self._build(model), model, self._endpoint.price_for(model))
            self._clients[model] = found
        return found

    @property
    def models(self) -> list[str]:
        return sorted(self._clients)


@dataclass(slots=True)
class _Entry:
    profile: AssistantProfile
    expires_at: float


class Profiles:
    """The profile of a tenant (``get``), what a request runs with (``run_profile``), and writes through to the
    store that forget this process's copy at once (other processes follow within the TTL)."""

    def __init__(
        self,
        store: ProfileStore | None,
        defaults: AssistantSettings,
        settings: ProfileSettings,
        *,
        models: ModelPool | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.settings = settings
        self._defaults = defaults
        self._models = models
        self._clock = clock
        self._entries: dict[str, _Entry] = {}
        self._loading: dict[str, asyncio.Task[AssistantProfile]] = {}
        self.loads = 0  # database reads, for tests and the benchmark

    def default(self, tenant: str) -> AssistantProfile:
        return default_profile(tenant, self._defaults)

    async def get(self, tenant: str) -> AssistantProfile:
        entry = self._entries.get(tenant)
        if entry is not None and entry.expires_at > self._clock():
            return entry.profile
        if self.store is None:
            return self.default(tenant)
        task = self._loading.get(tenant)
        if task is None:
            task = asyncio.create_task(self._load(tenant, entry), name=f"profile:{tenant}")
            self._loading[tenant] = task
            task.add_done_callback(lambda _: self._loading.pop(tenant, None))
        # Shielded: one caller going away must not cancel the read the others wait for.
        return await asyncio.shield(task)

    async def _load(self, tenant: str, known: _Entry | None) -> AssistantProfile:
        assert self.store is not None
        self.loads += 1
        try:
            async with asyncio.timeout(self.settings.load_timeout_s):
                stored = await self.store.get(tenant)
                routing = await self.store.routing_calibration(tenant)
        except (ProviderUnavailableError, TimeoutError) as exc:
            profile = known.profile if known is not None else self.default(tenant)
            kept = "the last known profile" if known is not None else "the default profile"
            logger.warning("profile store unavailable for tenant %r (%s): answering with %s", tenant, exc, kept)
        else:
            profile = stored if stored is not None else self.default(tenant)
            if routing is not None:
                profile = replace(profile, routing=routing)
        self._entries[tenant] = _Entry(profile, self._clock() + self.settings.cache_ttl_s)
        return profile

    def forget(self, tenant: str) -> None:
        self._entries.pop(tenant, None)

    async def save(self, profile: AssistantProfile) -> AssistantProfile:
        store = self._require_store()
        stored = await store.put(profile)
        self.forget(profile.tenant)
        return stored

    async def remove(self, tenant: str) -> bool:
        store = self._require_store()
        removed = await store.delete(tenant)
        self.forget(tenant)
        return removed

    def _require_store(self) -> ProfileStore:
        if self.store is None:
            raise ProviderUnavailableError("no profile store is configured", provider="profile_store")
        return self.store

    def run_profile(self, profile: AssistantProfile, client_instructions: str = "") -> RunProfile:
        """The assistant and the route models one request runs with."""
        llms: dict[Route, ChatClient] = {}
        if self._models is not None:
            llms = {route: self._models.client(model) for route, model in profile.route_models.items()}
        return RunProfile(assistant=profile.assistant(client_instructions), llms=llms)
