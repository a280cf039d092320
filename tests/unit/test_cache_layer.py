"""``open_cache``: the backend choice, and one prefix and backend shared by every cache part."""

from __future__ import annotations

from langchain_core.embeddings import Embeddings

from gateway.cache import CacheLayer, MemoryBackend, RedisBackend, open_cache
from gateway.cache.layer import shares_embeddings
from gateway.providers.redis import ResilientRedis
from gateway.query.schemas import QueryResponse
from gateway.settings import CacheSettings
from pipelines.shared.visibility import Visibility
from tests.scripted import query_response


class Constant(Embeddings):
    dimensions = 2

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [[1.0, 0.0] for _ in texts]

    def embed_query(self, text: str) -> list[float]:
        return [1.0, 0.0]


async def test_without_a_redis_url_the_cache_lives_in_process() -> None:
    layer = open_cache(None, CacheSettings(route_ttls={"direct": 0}, default_ttl_s=30, memory_max_entries=5))
    assert isinstance(layer.backend, MemoryBackend)
    assert layer.answers(QueryResponse).ttl_for("direct") == 0
    assert layer.answers(QueryResponse).ttl_for("multi_hop") == 30


async def test_with_a_redis_client_nothing_is_dialled_until_first_use() -> None:
    redis = ResilientRedis.from_url("redis://127.0.0.1:1/0", timeout_s=0.02)  # nothing listens there
    layer = open_cache(redis, CacheSettings())
    assert isinstance(layer.backend, RedisBackend)
    assert layer.backend.redis is redis  # the caller's client, not a pool of its own
    assert redis.failures == 0
    outcome = await layer.answers(QueryResponse).get_or_compute(
        tenant="acme", route="auto", query="q", compute=lambda: _value("single_hop"), visibility=Visibility.everything()
    )
    assert outcome.source == "bypass"
    assert redis.failures == 1
    await redis.aclose()


async def _value(route: str) -> QueryResponse:
    return query_response(route=route)


async def test_versions_and_responses_share_backend_and_prefix() -> None:
    layer: CacheLayer = open_cache(None, CacheSettings(prefix="p"))
    first = await layer.answers(QueryResponse).get_or_compute(
        tenant="acme", route="auto", query="q", compute=lambda: _value("single_hop"), visibility=Visibility.everything()
    )
    await layer.versions.bump("acme")
    second = await layer.answers(QueryResponse).get_or_compute(
        tenant="acme", route="auto", query="q", compute=lambda: _value("single_hop"), visibility=Visibility.everything()
    )
    assert (first.source, second.source) == ("computed", "computed")
    assert first.key is not None
    assert first.key.startswith("p:q:acme:")


async def test_wrapped_embeddings_use_the_same_backend() -> None:
    layer = open_cache(None, CacheSettings(prefix="p"))
    embeddings = layer.wrap_embeddings(Constant(), model="constant")
    await embeddings.aembed_query("q")
    assert await embeddings.aembed_query("q") == [1.0, 0.0]
    assert embeddings.hits == 1
    assert isinstance(layer.backend, MemoryBackend)
    assert len(layer.backend) == 1


async def test_process_local_vectors_stay_out_of_the_shared_backend() -> None:
    layer = open_cache(None, CacheSettings(prefix="p"))
    embeddings = layer.wrap_embeddings(Constant(), model="constant", process_entries=2)
    for text in ("a", "b", "c", "c"):
        await embeddings.aembed_query(text)
    assert (embeddings.hits, embeddings.misses) == (1, 3)
    assert len(layer.backend) == 0  # the response cache's backend never saw a vector
    await embeddings.aembed_query("a")  # evicted by the bound of two entries: computed again
    assert embeddings.misses == 4


def test_auto_shares_a_remote_providers_vectors_and_keeps_the_local_models() -> None:
    auto = CacheSettings()
    assert (shares_embeddings(auto, "use"), shares_embeddings(auto, "openai")) == (False, True)
    shared, local = CacheSettings(embedding_store="shared"), CacheSettings(embedding_store="process")
    assert (shares_embeddings(shared, "use"), shares_embeddings(local, "openai")) == (True, False)


async def test_a_namespace_separates_answers_but_not_versions() -> None:
    layer = open_cache(None, CacheSettings(prefix="p"))
    first = await layer.answers(QueryResponse, namespace="cfg1").get_or_compute(
        tenant="acme", route="auto", query="q", compute=lambda: _value("single_hop"), visibility=Visibility.everything()
    )
    assert first.key is not None
    assert first.key.startswith("p:cfg1:q:acme:")
    assert await layer.backend.get("p:ver:acme") is not None
