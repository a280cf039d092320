"""Opening the profiles in the app lifespan, on the gateway's database."""

from __future__ import annotations

from contextlib import AsyncExitStack

import httpx
from langchain_core.language_models import BaseChatModel

from gateway.profiles.service import ModelPool, Profiles
from gateway.profiles.store import ProfileStore
from gateway.providers import Database, LLMClient, build_chat_model, open_database
from gateway.settings import Settings


async def open_profiles(
    settings: Settings,
    database: Database | None,
    llm: LLMClient,
    stack: AsyncExitStack,
    *,
    chat_model: BaseChatModel | None = None,
    http_client: httpx.AsyncClient | None = None,
) -> Profiles:
    """Profiles share the gateway's database with the curation cycle (``database``, its store); with curation off
    they open the same database for themselves. ``chat_model``: a test's injected model, which then answers for every
    model name."""
    if database is None:
        url = settings.curation.database_url.get_secret_value()
        database = await open_database(Database.open(url), stack, migrate=settings.curation.migrate_on_start)

    def build(model: str) -> BaseChatModel:
        return chat_model or build_chat_model(settings.llm, settings.llm_endpoint, model=model, http_client=http_client)

    models = ModelPool(llm, build, settings.llm_endpoint)
    return Profiles(ProfileStore(database.engine), settings.assistant, settings.profiles, models=models)
