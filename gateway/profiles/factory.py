"""Opening the profiles in the app lifespan, on the curation store's database."""

from __future__ import annotations

from contextlib import AsyncExitStack

import httpx
from langchain_core.language_models import BaseChatModel

from gateway.curation.factory import open_curation_store
from gateway.curation.store import CurationStore
from gateway.profiles.service import ModelPool, Profiles
from gateway.profiles.store import ProfileStore
from gateway.providers.llm import LLMClient, build_chat_model
from gateway.settings import Settings


async def open_profiles(
    settings: Settings,
    curation_store: CurationStore | None,
    llm: LLMClient,
    stack: AsyncExitStack,
    *,
    chat_model: BaseChatModel | None = None,
    http_client: httpx.AsyncClient | None = None,
) -> Profiles:
    """Profiles share the curation store's engine (and migrations); with curation off they open the same
    database for themselves. ``chat_model``: a test's injected model, which then answers for every model name."""
    store = curation_store
    if store is None:
        enabled = settings.replace(curation={"enabled": True})
        store = await open_curation_store(enabled, stack)
    assert store is not None

    def build(model: str) -> BaseChatModel:
        return chat_model or build_chat_model(settings.llm, settings.llm_endpoint, model=model, http_client=http_client)

    models = ModelPool(llm, build, settings.llm_endpoint)
    return Profiles(ProfileStore(store.engine), settings.assistant, settings.profiles, models=models)
