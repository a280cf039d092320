"""``create_app(settings)``: the Litestar application, and the one lifespan that opens what each domain owns.

Each domain's factory takes its settings and the shared clients (:mod:`gateway.platform`) and returns the one object
its controllers need; the lifespan puts it in the app's state under the name the handlers ask for by ``Provide``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from typing import Any

from litestar import Litestar, Router
from litestar.datastructures import State
from litestar.di import Provide
from litestar.openapi import OpenAPIConfig
from litestar.openapi.plugins import SwaggerRenderPlugin
from litestar.openapi.spec import Components

from gateway.access import (
    SECURITY_SCHEMES,
    console_cookies,
    open_access,
    open_identity,
    provide_principal,
    provide_reader,
)
from gateway.cache import ChangeNotAcknowledgedError
from gateway.chat import ChatController, ChatService
from gateway.console import console_router, template_config
from gateway.curation import (
    CurationController,
    CurationParts,
    EvalSuiteController,
    FeedbackController,
    KnowledgeChanges,
    open_curation_store,
    provide_curation,
    start_curation,
    start_recorder,
)
from gateway.errors import handle_exception
from gateway.guardrails import Guardrails
from gateway.knowledge import DocumentController, FileController, KnowledgeBase, load_sample_kb, open_knowledge
from gateway.observability import trace_requests
from gateway.overrides import ProviderOverrides
from gateway.platform import open_platform
from gateway.profiles import ProfileController, open_profiles, provide_profiles
from gateway.query import QueryController, load_calibration, open_query_service
from gateway.settings import Settings
from gateway.system import HealthController, MetricsController, open_readiness

logger = logging.getLogger("gateway")

# What the lifespan puts in the app's state, each under the name of the handlers' dependency that reads it.
STATE_DEPENDENCIES = ("telemetry", "access", "identity", "knowledge", "query_service", "chat_service", "readiness")


def _lifespan(
    settings: Settings, overrides: ProviderOverrides
) -> Callable[[Litestar], AbstractAsyncContextManager[None]]:
    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        async with AsyncExitStack() as stack:
            platform = await open_platform(settings, overrides, stack)
            # Fitted for the embedder at its first start (a worker thread: it embeds the calibration set); a gateway
            # whose embedder has no calibration and cannot be fitted refuses to start (CalibrationUnavailableError).
            calibration = await asyncio.to_thread(load_calibration, settings, platform.embeddings)
            curation_store = await open_curation_store(settings, stack)
            changes = KnowledgeChanges(curation_store) if curation_store is not None else None
            knowledge = open_knowledge(settings, platform, changes, stack)
            recorder = None
            if curation_store is not None:
                recorder = start_recorder(settings, curation_store, knowledge, platform.telemetry, stack)
            profiles = await open_profiles(
                settings,
                curation_store,
                platform.llm,
                stack,
                chat_model=overrides.chat_model,
                http_client=platform.upstream_http,
            )
            # A name model loads: off the event loop.
            guard = await asyncio.to_thread(Guardrails.from_settings, settings.guard, platform.telemetry)
            query_service = await open_query_service(
                settings,
                platform,
                knowledge,
                guard,
                profiles,
                calibration,
                stack,
                on_answer=recorder.observe if recorder is not None else None,
            )
            identity = open_identity(
                settings.identity, platform.http, settings.access.api_keys, events=platform.telemetry
            )
            # Once before serving; a provider that cannot be reached is logged, and the start goes on.
            await identity.prefetch_keys()
            curation = None
            if curation_store is not None and recorder is not None and changes is not None:
                parts = CurationParts(
                    curation_store,
                    recorder,
                    changes,
                    knowledge,
                    query_service,
                    identity,
                    platform.llm,
                    platform.telemetry,
                )
                curation = await start_curation(settings, parts, calibration, stack)
            app.state.update(
                telemetry=platform.telemetry,  # read by the tracing middleware too
                access=open_access(settings.access, settings.server.host, platform.redis),  # and by the key hooks
                identity=identity,  # read by ``reader`` and the console's sign-in
                knowledge=knowledge,
                query_service=query_service,
                chat_service=ChatService(query_service, platform.llm),
                curation=curation,
                profiles=profiles,
                readiness=open_readiness(
                    settings,
                    platform,
                    knowledge,
                    curation_store,
                    identity,
                    ping_primary=overrides.chat_model is None,
                    answers=query_service.caches.exact,
                ),
            )
            if settings.server.load_sample_kb:
                await _load_sample(knowledge)
            logger.info(
                "gateway ready: llm=%s at %s, vector store=%s, router=%s, cache=%s",
                settings.llm.model,
                settings.llm_endpoint.base_url,
                platform.store.name,
                settings.router.classifier,
                platform.describe_cache(),
            )
            yield

    return lifespan


async def _load_sample(knowledge: KnowledgeBase) -> None:
    try:
        chunks = await load_sample_kb(knowledge)
    except ChangeNotAcknowledgedError as exc:  # a demo convenience must not stop a start-up
        logger.warning("sample knowledge base not (fully) loaded: %s", exc.detail)
    else:
        logger.info("sample knowledge base loaded into tenant 'default' (%d chunks)", chunks)


def _from_state(name: str) -> Provide:
    """A dependency handing a handler what the lifespan put in the app's state under ``name``."""

    def provide(state: State) -> Any:
        return state[name]

    return Provide(provide, sync_to_thread=False)


def create_app(settings: Settings | None = None, overrides: ProviderOverrides | None = None) -> Litestar:
    settings = settings or Settings()
    overrides = overrides or ProviderOverrides()
    console = console_cookies(settings.console, settings.server.host) if settings.console.enabled else None
    return Litestar(
        route_handlers=[
            QueryController,
            DocumentController,
            # Uploads carry whole files, far past a JSON request's limit: their own, per file and per upload.
            Router("/", route_handlers=[FileController], request_max_body_size=settings.limits.max_upload_bytes),
            HealthController,
            ChatController,
            MetricsController,
            FeedbackController,
            CurationController,
            EvalSuiteController,
            ProfileController,
            *([console_router(console, settings)] if console is not None else []),
        ],
        template_config=template_config(),
        middleware=[trace_requests, *([console.session.middleware] if console is not None else [])],
        lifespan=[_lifespan(settings, overrides)],
        dependencies={
            **{name: _from_state(name) for name in STATE_DEPENDENCIES},
            "settings": Provide(lambda: settings, sync_to_thread=False, use_cache=True),
            "principal": Provide(provide_principal, sync_to_thread=False),
            "reader": Provide(provide_reader),
            "curation": Provide(provide_curation, sync_to_thread=False),
            "profiles": Provide(provide_profiles, sync_to_thread=False),
        },
        request_max_body_size=settings.limits.max_body_bytes,
        exception_handlers={Exception: handle_exception},
        # Logging is the process's to configure (``python -m gateway``: JSON lines); Litestar's default would
        # replace the root handler with its own text format at start-up.
        logging_config=None,
        openapi_config=OpenAPIConfig(
            title="Adaptive RAG routing gateway",
            version="1.0.0",
            path="/schema",
            render_plugins=[SwaggerRenderPlugin()],
            components=Components(security_schemes=SECURITY_SCHEMES),
        ),
    )
