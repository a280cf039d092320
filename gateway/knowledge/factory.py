"""The knowledge base of one app: the store, the query vectors' cache, and the in-memory matrices the router's
probe searches."""

from __future__ import annotations

import json
from contextlib import AsyncExitStack
from importlib import resources

from threadpoolctl import threadpool_limits

from gateway.cache import shares_embeddings
from gateway.knowledge.chunking import Chunker
from gateway.knowledge.matrices import TenantMatrices
from gateway.knowledge.service import KnowledgeBase, NewDocument, OnChange
from gateway.platform import Platform
from gateway.settings import Settings


def keeps_vectors(settings: Settings) -> bool:
    """Whether query vectors are cached at all (the answer cache on, with a vector TTL)."""
    return settings.cache.enabled and settings.cache.embedding_ttl_s > 0


def shares_vectors(settings: Settings) -> bool:
    """Whether cached query vectors are shared between processes (in Redis) rather than kept in this one."""
    return keeps_vectors(settings) and shares_embeddings(settings.cache, settings.embeddings.provider)


def open_knowledge(
    settings: Settings, platform: Platform, changes: OnChange | None, stack: AsyncExitStack
) -> KnowledgeBase:
    """``changes``: the curation store's write hook (stale answers, suite runs), when curation is on."""
    embeddings, cache = platform.embeddings, platform.cache
    if cache is not None and keeps_vectors(settings):
        embeddings = cache.wrap_embeddings(
            embeddings,
            model=settings.embeddings.fingerprint(),  # a vector's key names everything that decided it
            ttl_s=settings.cache.embedding_ttl_s,
            process_entries=None if shares_vectors(settings) else settings.cache.embedding_max_entries,
        )
    versions = cache.versions if cache is not None else None
    matrices = None
    if versions is not None and settings.vector_store.probe_index_max_mb > 0:
        matrices = TenantMatrices(platform.store, versions, settings.vector_store.probe_index_max_mb * 1024 * 1024)
        stack.push_async_callback(matrices.aclose)
        # One BLAS thread for the app's life: the probe's product is too small to share out.
        stack.enter_context(threadpool_limits(limits=1, user_api="blas"))
    return KnowledgeBase(
        embeddings,
        platform.store,
        Chunker(settings.chunking.size, settings.chunking.overlap),
        versions=versions,
        on_change=changes,
        hybrid=settings.retrieval.hybrid_search,
        links=settings.retrieval.entity_links,
        matrices=matrices,
    )


async def load_sample_kb(knowledge: KnowledgeBase) -> int:
    """The demo documents shipped with the package, into tenant ``default``; returns the chunks written."""
    raw = (resources.files("gateway.knowledge") / "sample_kb" / "documents.json").read_text(encoding="utf-8")
    docs = [
        NewDocument(id=d["id"], text=d["text"], title=d.get("title", ""), metadata=d.get("metadata", {}))
        for d in json.loads(raw)
    ]
    result = await knowledge.ingest("default", docs)
    return result.chunks
