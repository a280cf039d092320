"""A live gateway on the scripted chat model, for schemathesis (no LLM server needed, answers in milliseconds).

``python -m uvicorn --factory tests.contract.scripted_app:create --port 8150`` from the repo root.
Everything but the chat model is the production wiring: real embeddings, router, LanceDB, caches,
key checks and limits, configured from the usual GATEWAY_* variables (API keys included).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from litestar import Litestar

from gateway.app import create_app
from gateway.overrides import ProviderOverrides
from gateway.settings import Settings
from tests.chat_support import chat_model
from tests.fakes.scripted_chat import ScriptedChatModel


def create() -> Litestar:
    workdir = Path(os.environ.get("CONTRACT_WORKDIR") or tempfile.mkdtemp(prefix="rgw-contract-"))
    settings = Settings().replace(
        vector_store={"path": workdir / "lancedb"}, llm_endpoint={"base_url": "http://127.0.0.1:9/v1"}
    )
    return create_app(settings, ProviderOverrides(chat_model=ScriptedChatModel(responder=chat_model())))
