"""Shared fixtures: one embedding model and one trained router per session, apps per test."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import BaseMessage
from litestar.testing import AsyncTestClient
from pydantic import SecretStr

from gateway.app import create_app
from gateway.overrides import ProviderOverrides
from gateway.providers.embeddings import USEEmbeddings
from gateway.settings import Settings
from routes.calibration import Calibration
from tests.calibration_support import use_calibration, use_calibration_file
from tests.fakes.scripted_chat import ScriptedChatModel

Responder = Callable[[list[BaseMessage], dict[str, Any]], str]


@pytest.fixture(scope="session")
def embeddings() -> USEEmbeddings:
    return USEEmbeddings()


@pytest.fixture(scope="session")
def calibration() -> Calibration:
    """The USE calibration, fitted once per machine and loaded once per session (:mod:`tests.calibration_support`)."""
    return use_calibration()


@pytest.fixture(scope="session")
def router_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The apps' artefact directory, holding the USE calibration already: an app fits only what is not there."""
    directory = tmp_path_factory.mktemp("router")
    source = use_calibration_file()
    shutil.copyfile(source, directory / source.name)
    return directory


@pytest.fixture
def settings(tmp_path: Path, router_cache_dir: Path) -> Settings:
    return Settings().replace(
        vector_store={"path": tmp_path / "lancedb"},
        router_artefact={"cache_dir": router_cache_dir},
        llm_endpoint={"base_url": "http://127.0.0.1:9/v1"},  # nothing listens: a test that reaches it fails loudly
        redis={"url": None},
        curation={"database_url": SecretStr(f"sqlite+aiosqlite:///{tmp_path}/curation.db")},
    )


def grounded_or_direct(messages: list[BaseMessage], _: dict[str, Any]) -> str:
    """A plausible model: cites passage 1 when given context, chats otherwise."""
    last = str(messages[-1].content)
    if "Context passages" in last:
        return "According to the documents, the answer is in passage one [1]."
    return "Hello! I am the company assistant."


@pytest.fixture
def make_client(settings: Settings, embeddings: USEEmbeddings) -> Callable[..., Any]:
    """``async with make_client(responder) as (client, model):`` an app on the scripted model."""

    def factory(responder: Responder = grounded_or_direct, *, settings_override: Settings | None = None) -> Any:
        model = ScriptedChatModel(responder=responder)
        app = create_app(settings_override or settings, ProviderOverrides(chat_model=model, embeddings=embeddings))

        class Session:
            async def __aenter__(self) -> tuple[AsyncTestClient[Any], ScriptedChatModel]:
                self.client = AsyncTestClient(app)
                await self.client.__aenter__()
                return self.client, model

            async def __aexit__(self, *exc: object) -> None:
                await self.client.__aexit__(None, None, None)

        return Session()

    return factory


@pytest.fixture
async def client(make_client: Callable[..., Any]) -> AsyncIterator[AsyncTestClient[Any]]:
    async with make_client() as (test_client, _):
        yield test_client
