"""The Pinecone store through the real ``pinecone`` client, against a local fake of the data plane.

The fake enforces the serverless rules (no delete by filter, 100-id list pages, flat metadata), so
these tests fail if the adapter leans on something a real serverless index would refuse.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

import pytest
from pinecone.errors.exceptions import PineconeError

from gateway.errors import ClientError, ProviderError, ProviderUnavailableError
from gateway.providers.vectorstores.base import ChunkRecord
from gateway.providers.vectorstores.pinecone_store import PineconeVectorStore
from pipelines.shared.visibility import Visibility
from tests.fakes.pinecone_server import FAKE_API_KEY, FakePinecone, running_fake_pinecone
from tests.ports import free_port

DIM = 4


def _chunks(doc_id: str, vectors: Sequence[Sequence[float]], **metadata: Any) -> list[ChunkRecord]:
    return [
        ChunkRecord(
            doc_id=doc_id,
            index=i,
            title=f"{doc_id} title",
            text=f"{doc_id} chunk {i}",
            vector=list(v),
            metadata=dict(metadata),
        )
        for i, v in enumerate(vectors)
    ]


def _cosine(a: Sequence[float], b: Sequence[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True)) / (math.hypot(*a) * math.hypot(*b))


@pytest.fixture
def fake() -> Iterator[FakePinecone]:
    with running_fake_pinecone(dimension=DIM) as server:
        yield server


@pytest.fixture
async def store(fake: FakePinecone) -> AsyncIterator[PineconeVectorStore]:
    opened = await PineconeVectorStore.open(FAKE_API_KEY, fake.url, "test-index", DIM)
    yield opened
    await opened.close()


@pytest.fixture
def no_retry_sleep(monkeypatch: pytest.MonkeyPatch) -> None:
    """The client backs off between retries; the tests only care about the final error."""

    async def _no_sleep(_: float) -> None:
        return None

    monkeypatch.setattr("pinecone._internal.http_client._async_retry_sleep", _no_sleep)


async def test_search_ranks_by_cosine_similarity(store: PineconeVectorStore) -> None:
    await store.replace_document("acme", "osaka", _chunks("osaka", [[1, 0, 0, 0], [0.8, 0.6, 0, 0]]))
    await store.replace_document("acme", "paris", _chunks("paris", [[0, 0, 1, 0], [0, 0.6, 0.8, 0]]))
    query = [0.9, 0.1, 0.0, 0.0]

    hits = await store.search("acme", query, k=3, visibility=Visibility.everything())

    assert [h.chunk_id for h in hits] == ["osaka#0", "osaka#1", "paris#1"]
    assert [h.doc_id for h in hits] == ["osaka", "osaka", "paris"]
    expected = [_cosine(query, v) for v in ([1, 0, 0, 0], [0.8, 0.6, 0, 0], [0, 0.6, 0.8, 0])]
    assert [h.score for h in hits] == pytest.approx(expected)
    assert hits[0].score > hits[1].score > hits[2].score


async def test_linked_search_finds_the_chunks_about_the_keys_by_cosine(store: PineconeVectorStore) -> None:
    def about(doc_id: str, keys: tuple[str, ...], vector: list[float]) -> list[ChunkRecord]:
        return [ChunkRecord(doc_id, 0, doc_id, f"{doc_id} text", vector, {}, keys)]

    await store.replace_document("acme", "temple", about("temple", ("shirley temple",), [0, 1, 0, 0]))
    await store.replace_document("acme", "kiss", about("kiss", ("kiss and tell",), [1, 0, 0, 0]))
    await store.replace_document("acme", "black", about("black", ("shirley temple black", "black"), [0, 0, 1, 0]))

    hits = await store.linked_search(
        "acme", ["shirley temple", "black"], [0, 0.6, 0.8, 0], k=5, visibility=Visibility.everything()
    )

    assert [h.doc_id for h in hits] == ["black", "temple"]
    assert await store.linked_search("acme", ["nobody"], [1, 0, 0, 0], k=5, visibility=Visibility.everything()) == []
    assert (
        await store.linked_search("other", ["shirley temple"], [1, 0, 0, 0], k=5, visibility=Visibility.everything())
        == []
    )


async def test_reupsert_with_fewer_chunks_removes_leftovers(store: PineconeVectorStore, fake: FakePinecone) -> None:
    await store.replace_document("acme", "doc", _chunks("doc", [[1, 0, 0, 0]] * 3))
    new = [ChunkRecord("doc", 0, "v2", "only chunk", [0, 1, 0, 0])]

    await store.replace_document("acme", "doc", new)

    assert fake.ids("acme") == ["doc#0"]
    hits = await store.search("acme", [0, 1, 0, 0], k=10, visibility=Visibility.everything())
    assert [(h.chunk_id, h.text, h.title) for h in hits] == [("doc#0", "only chunk", "v2")]


async def test_replace_with_no_chunks_empties_the_document(store: PineconeVectorStore, fake: FakePinecone) -> None:
    await store.replace_document("acme", "doc", _chunks("doc", [[1, 0, 0, 0]] * 2))
    await store.replace_document("acme", "doc", [])
    assert fake.ids("acme") == []
    assert await store.delete_document("acme", "doc") is False


async def test_large_documents_upsert_in_batches_and_clean_up_across_list_pages(
    store: PineconeVectorStore, fake: FakePinecone
) -> None:
    await store.replace_document("acme", "big", _chunks("big", [[1, 0, 0, 0]] * 250))
    assert fake.count("POST", "/vectors/upsert") == 3
    assert len(fake.ids("acme")) == 250

    await store.replace_document("acme", "big", _chunks("big", [[1, 0, 0, 0]] * 10))

    assert fake.ids("acme") == sorted(f"big#{i}" for i in range(10))
    assert fake.count("GET", "/vectors/list") >= 2 + 3  # 1 page for the first write, 3 for the second


async def test_prefix_neighbours_are_not_touched(store: PineconeVectorStore, fake: FakePinecone) -> None:
    """Listing ``a#`` also returns ``a#b#0`` and ``a#1x``; neither belongs to document ``a``."""
    await store.replace_document("acme", "a#b", _chunks("a#b", [[1, 0, 0, 0]]))
    await store.replace_document("acme", "ab", _chunks("ab", [[1, 0, 0, 0]]))
    await store.replace_document("acme", "a", _chunks("a", [[1, 0, 0, 0]] * 2))

    await store.replace_document("acme", "a", _chunks("a", [[1, 0, 0, 0]]))
    assert fake.ids("acme") == ["a#0", "a#b#0", "ab#0"]

    assert await store.delete_document("acme", "a") is True
    assert fake.ids("acme") == ["a#b#0", "ab#0"]


async def test_tenants_are_isolated_by_namespace(store: PineconeVectorStore, fake: FakePinecone) -> None:
    await store.replace_document("tenant-a", "secret", _chunks("secret", [[1, 0, 0, 0]]))
    await store.replace_document("tenant-b", "public", _chunks("public", [[0, 1, 0, 0]]))

    hits = await store.search("tenant-b", [1, 0, 0, 0], k=10, visibility=Visibility.everything())

    assert [h.doc_id for h in hits] == ["public"]
    assert await store.search("tenant-c", [1, 0, 0, 0], k=10, visibility=Visibility.everything()) == []
    assert await store.delete_document("tenant-b", "secret") is False
    assert fake.ids("tenant-a") == ["secret#0"]


async def test_delete_returns_true_then_false(store: PineconeVectorStore) -> None:
    await store.replace_document("acme", "doc", _chunks("doc", [[1, 0, 0, 0]] * 3))

    assert await store.delete_document("acme", "doc") is True
    assert await store.delete_document("acme", "doc") is False
    assert await store.search("acme", [1, 0, 0, 0], k=5, visibility=Visibility.everything()) == []


async def test_metadata_round_trips_through_flat_pinecone_metadata(
    store: PineconeVectorStore, fake: FakePinecone
) -> None:
    metadata = {"source": "wiki", "tags": ["a", "b"], "nested": {"year": 2024, "ok": True}, "city": "大阪"}
    await store.replace_document("acme", "doc", _chunks("doc", [[1, 0, 0, 0]], **metadata))

    [hit] = await store.search("acme", [1, 0, 0, 0], k=1, visibility=Visibility.everything())

    assert hit.metadata == metadata
    assert (hit.title, hit.text) == ("doc title", "doc chunk 0")
    stored = fake.namespaces["acme"]["doc#0"]["metadata"]
    assert set(stored) == {"doc_id", "chunk_index", "title", "text", "metadata_json", "about", "access"}
    assert stored["access"] == ["~"]  # no access given: UNSET, the tenant's policy decides
    assert isinstance(stored["metadata_json"], str)


async def test_ping_reports_a_healthy_index(store: PineconeVectorStore, fake: FakePinecone) -> None:
    await store.ping()
    assert fake.count("POST", "/describe_index_stats") == 1


@pytest.mark.usefixtures("no_retry_sleep")
async def test_server_down_raises_provider_unavailable() -> None:
    store = await PineconeVectorStore.open(FAKE_API_KEY, f"http://127.0.0.1:{free_port()}", "idx", DIM)
    try:
        with pytest.raises(ProviderUnavailableError) as search_error:
            await store.search("acme", [1, 0, 0, 0], k=3, visibility=Visibility.everything())
        assert search_error.value.provider == "vector_store"
        assert isinstance(search_error.value.__cause__, PineconeError)
        with pytest.raises(ProviderUnavailableError):
            await store.replace_document("acme", "doc", _chunks("doc", [[1, 0, 0, 0]]))
        with pytest.raises(ProviderUnavailableError):
            await store.delete_document("acme", "doc")
        with pytest.raises(ProviderUnavailableError):
            await store.ping()
    finally:
        await store.close()


@pytest.mark.usefixtures("no_retry_sleep")
async def test_upstream_5xx_is_unavailable(store: PineconeVectorStore, fake: FakePinecone) -> None:
    fake.fail_with = 503
    with pytest.raises(ProviderUnavailableError) as caught:
        await store.search("acme", [1, 0, 0, 0], k=3, visibility=Visibility.everything())
    assert caught.value.status_code == 503


async def test_rejected_api_key_is_a_provider_error(fake: FakePinecone) -> None:
    store = await PineconeVectorStore.open("wrong-key", fake.url, "test-index", DIM)
    try:
        with pytest.raises(ProviderError) as caught:
            await store.search("acme", [1, 0, 0, 0], k=3, visibility=Visibility.everything())
        assert type(caught.value) is ProviderError
        with pytest.raises(ProviderUnavailableError):
            await store.ping()  # readiness: any failure means "cannot serve"
    finally:
        await store.close()


async def test_input_errors_fail_before_the_network(store: PineconeVectorStore, fake: FakePinecone) -> None:
    with pytest.raises(ValueError, match="invalid tenant"):
        await store.search("../other", [1, 0, 0, 0], k=1, visibility=Visibility.everything())
    with pytest.raises(ClientError):
        await store.replace_document("acme", "café", _chunks("café", [[1, 0, 0, 0]]))
    assert await store.delete_document("acme", "café") is False
    with pytest.raises(ProviderError, match="dimensions"):
        await store.search("acme", [1, 0, 0], k=1, visibility=Visibility.everything())
    assert await store.search("acme", [1, 0, 0, 0], k=0, visibility=Visibility.everything()) == []
    assert fake.requests == []
