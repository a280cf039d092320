"""A knowledge change is acknowledged only with its version bump recorded: the fence around store writes."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

import pytest
from langchain_core.embeddings import Embeddings

from gateway.cache.backend import CacheUnavailableError
from gateway.cache.versions import ChangeNotAcknowledgedError, KnowledgeVersions
from gateway.errors import ProviderError
from gateway.knowledge.chunking import Chunker
from gateway.knowledge.service import KnowledgeBase, NewDocument
from gateway.providers.vectorstores.base import ChunkRecord, VectorStore
from pipelines.shared.deps import Passage
from pipelines.shared.visibility import Visibility
from tests.unit.test_cache_exact import FlakyMemory

DOC = NewDocument(id="leave", text="Acme employees get 30 days.", title="Leave")


class FlatEmbeddings(Embeddings):
    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [[1.0, 0.0] for _ in texts]

    def embed_query(self, text: str) -> list[float]:
        return [1.0, 0.0]


async def _nothing() -> None:
    return None


class DictStore(VectorStore):
    """Documents in a dict; ``during_write`` runs inside each write, ``fail`` makes writes raise."""

    name = "dict"

    def __init__(self) -> None:
        self.docs: dict[str, list[ChunkRecord]] = {}
        self.during_write: Callable[[], Awaitable[None]] = _nothing
        self.fail = False

    async def _write(self) -> None:
        await self.during_write()
        if self.fail:
            raise ProviderError("store write failed", provider="vector_store")

    async def replace_document(self, tenant: str, doc_id: str, chunks: Sequence[ChunkRecord]) -> None:
        await self._write()
        self.docs[doc_id] = list(chunks)

    async def delete_document(self, tenant: str, doc_id: str) -> bool:
        await self._write()
        return self.docs.pop(doc_id, None) is not None

    async def search(self, tenant: str, vector: Sequence[float], k: int, *, visibility: Visibility) -> list[Passage]:
        return []

    async def ping(self) -> None:
        return None


@pytest.fixture
def backend() -> FlakyMemory:
    return FlakyMemory()


@pytest.fixture
def versions(backend: FlakyMemory) -> KnowledgeVersions:
    return KnowledgeVersions(backend, prefix="t")


@pytest.fixture
def store() -> DictStore:
    return DictStore()


@pytest.fixture
def knowledge(store: DictStore, versions: KnowledgeVersions) -> KnowledgeBase:
    return KnowledgeBase(FlatEmbeddings(), store, Chunker(200, 20), versions=versions)


async def test_an_acknowledged_change_moved_the_version_past_every_read_before_its_write(
    knowledge: KnowledgeBase, versions: KnowledgeVersions, store: DictStore
) -> None:
    before = await versions.current("acme")
    seen_during_write: list[int] = []

    async def read_version_during_write() -> None:  # a query racing the write reads this version
        seen_during_write.append(await versions.current("acme"))

    store.during_write = read_version_during_write
    await knowledge.ingest("acme", [DOC])
    after = await versions.current("acme")
    assert after > max(seen_during_write) > before  # one bump fenced the write, another followed it
    assert "leave" in store.docs


async def test_a_cache_down_before_the_change_refuses_it_with_nothing_written(
    knowledge: KnowledgeBase, backend: FlakyMemory, store: DictStore
) -> None:
    backend.down = True
    with pytest.raises(ChangeNotAcknowledgedError) as refused:
        await knowledge.ingest("acme", [DOC])
    assert store.docs == {}
    assert refused.value.status_code == 503
    assert refused.value.headers == {"Retry-After": "5"}
    assert "retry the same request" in refused.value.detail


async def test_a_cache_failing_during_the_change_leaves_it_unacknowledged_and_pending_until_it_lands(
    knowledge: KnowledgeBase, backend: FlakyMemory, versions: KnowledgeVersions, store: DictStore
) -> None:
    before = await versions.current("acme")

    async def redis_dies() -> None:
        backend.down = True

    store.during_write = redis_dies
    with pytest.raises(ChangeNotAcknowledgedError):
        await knowledge.ingest("acme", [DOC])
    assert "leave" in store.docs  # written, but not acknowledged
    assert versions.pending == {"acme"}
    with pytest.raises(CacheUnavailableError):  # no cached answer for it while its bump has not landed...
        await versions.current("acme")
    backend.down = False
    assert await versions.current("acme") == before + 2  # ...and it lands on the next read: fence + deferred bump
    assert not versions.pending


async def test_a_failed_write_reports_its_own_error_and_still_invalidates(
    knowledge: KnowledgeBase, versions: KnowledgeVersions, store: DictStore
) -> None:
    before = await versions.current("acme")
    store.fail = True
    with pytest.raises(ProviderError, match="store write failed"):
        await knowledge.ingest("acme", [DOC])
    assert await versions.current("acme") == before + 2  # a half-done write may have changed something


async def test_a_retried_delete_still_invalidates_though_the_document_is_gone(
    knowledge: KnowledgeBase, backend: FlakyMemory, versions: KnowledgeVersions, store: DictStore
) -> None:
    await knowledge.ingest("acme", [DOC])

    async def redis_dies() -> None:
        backend.down = True

    store.during_write = redis_dies
    with pytest.raises(ChangeNotAcknowledgedError):
        await knowledge.delete("acme", "leave")
    store.during_write = _nothing
    backend.down = False
    versions_before_retry = await versions.current("acme")
    assert await knowledge.delete("acme", "leave") is False  # the first attempt deleted it
    assert await versions.current("acme") == versions_before_retry + 2


async def test_without_a_cache_changes_are_plain_writes(store: DictStore) -> None:
    knowledge = KnowledgeBase(FlatEmbeddings(), store, Chunker(200, 20))
    await knowledge.ingest("acme", [DOC])
    assert await knowledge.delete("acme", "leave") is True
