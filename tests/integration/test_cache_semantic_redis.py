"""The semantic cache against the real Redis 7 (no modules) with the real USE embeddings.

Every test writes under its own key prefix in DB 15 and deletes only that prefix afterwards.
"""

from __future__ import annotations

import asyncio
import socket
from urllib.parse import urlsplit

import pytest
from redis.asyncio import Redis

from gateway.cache.backend import RedisBackend
from gateway.cache.contrast import find_contrast
from gateway.cache.semantic import SemanticCache, SimilarityThreshold
from gateway.cache.versions import KnowledgeVersions
from gateway.providers.embeddings import USEEmbeddings
from gateway.providers.redis import ResilientRedis
from gateway.settings import SemanticCacheSettings
from pipelines.shared.visibility import Visibility
from routes.calibration import Calibration
from routes.offline.eval.semantic_cache import Pair, load_pairs
from tests.integration.conftest import REDIS_TEST_URL

pytestmark = pytest.mark.redis


CATEGORIES = ("number", "date", "negation", "entity", "comparison", "role", "topic")


def calibrated(calibration: Calibration) -> SimilarityThreshold:
    return SimilarityThreshold(calibration.semantic_threshold)


@pytest.fixture
def cache(backend: RedisBackend, embeddings: USEEmbeddings, prefix: str, calibration: Calibration) -> SemanticCache:
    return SemanticCache(SemanticCacheSettings(), backend, embeddings, prefix=prefix, threshold=calibrated(calibration))


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])  # released on exit: nothing listens there


def hardest_pair(category: str, embeddings: USEEmbeddings) -> Pair:
    """The most similar contrast pair of a category: the one most likely to be served wrongly."""
    pairs = [p for p in load_pairs() if p.kind == "contrast" and p.category == category]
    vectors = embeddings.embed_array([text for p in pairs for text in (p.a, p.b)])
    sims = [float(vectors[2 * i] @ vectors[2 * i + 1]) for i in range(len(pairs))]
    return max(zip(sims, range(len(pairs)), pairs, strict=True))[2]


async def test_a_paraphrase_hits(cache: SemanticCache, redis: Redis, prefix: str) -> None:
    assert await cache.store(
        "acme", 7, "How do I reset my VPN password?", None, b'{"answer":"vpn"}', visibility=Visibility.everything()
    )
    hit = await cache.lookup("acme", 7, "How can I reset the password for my VPN?", visibility=Visibility.everything())
    assert hit is not None
    assert hit.payload == b'{"answer":"vpn"}'
    assert hit.matched_query == "How do I reset my VPN password?"
    assert hit.similarity >= cache.threshold
    keys = [key.decode() async for key in redis.scan_iter(match=f"{prefix}:*")]
    assert keys
    assert all(key.startswith(f"{prefix}:sem:acme:v7:") for key in keys)
    assert min([await redis.pttl(key) for key in keys]) > 0  # entries and buckets expire
    assert (
        await cache.lookup("acme", 7, "How do I reset my VPN password?", visibility=Visibility.everything()) is not None
    )  # itself, too


async def test_japanese_paraphrase_hits(cache: SemanticCache) -> None:
    await cache.store(
        "acme",
        1,
        "VPNのパスワードをリセットする方法を教えてください。",
        None,
        b"vpn",
        visibility=Visibility.everything(),
    )
    hit = await cache.lookup(
        "acme", 1, "VPNのパスワードはどうすればリセットできますか？", visibility=Visibility.everything()
    )
    assert hit is not None
    assert hit.payload == b"vpn"


@pytest.mark.parametrize("category", CATEGORIES)
async def test_contrast_pairs_do_not_hit(cache: SemanticCache, embeddings: USEEmbeddings, category: str) -> None:
    pair = hardest_pair(category, embeddings)
    await cache.store("acme", 1, pair.a, None, b"a", visibility=Visibility.everything())
    assert await cache.lookup("acme", 1, pair.b, visibility=Visibility.everything()) is None, (pair.a, pair.b)
    if category != "topic":  # these are close enough to pass the threshold: the guard refused them
        assert cache.stats.rejected == 1
        assert find_contrast(pair.b, pair.a) is not None


async def test_tenants_are_isolated(cache: SemanticCache) -> None:
    await cache.store("acme", 1, "How do I reset my VPN password?", None, b"acme", visibility=Visibility.everything())
    assert (
        await cache.lookup("globex", 1, "How can I reset the password for my VPN?", visibility=Visibility.everything())
        is None
    )
    await cache.store(
        "globex", 1, "How do I reset my VPN password?", None, b"globex", visibility=Visibility.everything()
    )
    hit = await cache.lookup(
        "globex", 1, "How can I reset the password for my VPN?", visibility=Visibility.everything()
    )
    assert hit is not None
    assert hit.payload == b"globex"


async def test_a_version_bump_makes_old_entries_unreachable(
    cache: SemanticCache, backend: RedisBackend, prefix: str
) -> None:
    versions = KnowledgeVersions(backend, prefix=prefix)
    before = await versions.current("acme")
    await cache.store(
        "acme", before, "How do I reset my VPN password?", None, b"old", visibility=Visibility.everything()
    )
    after = await versions.bump("acme")
    assert after is not None
    assert after > before
    assert (
        await cache.lookup(
            "acme",
            await versions.current("acme"),
            "How can I reset the password for my VPN?",
            visibility=Visibility.everything(),
        )
        is None
    )


async def test_entries_expire(
    backend: RedisBackend, embeddings: USEEmbeddings, prefix: str, calibration: Calibration
) -> None:
    cache = SemanticCache(
        SemanticCacheSettings(), backend, embeddings, prefix=prefix, ttl_s=0.3, threshold=calibrated(calibration)
    )
    await cache.store("acme", 1, "How do I reset my VPN password?", None, b"x", visibility=Visibility.everything())
    assert (
        await cache.lookup("acme", 1, "How can I reset the password for my VPN?", visibility=Visibility.everything())
        is not None
    )
    await asyncio.sleep(0.4)
    assert (
        await cache.lookup("acme", 1, "How can I reset the password for my VPN?", visibility=Visibility.everything())
        is None
    )


async def test_redis_outage_degrades_to_a_miss(embeddings: USEEmbeddings, calibration: Calibration) -> None:
    host = urlsplit(REDIS_TEST_URL).hostname
    redis = ResilientRedis.from_url(f"redis://{host}:{closed_port()}/15", timeout_s=0.2, backoff_s=0.0)
    cache = SemanticCache(
        SemanticCacheSettings(),
        RedisBackend(redis),
        embeddings,
        prefix="unreachable",
        threshold=calibrated(calibration),
    )
    try:
        assert (
            await cache.store(
                "acme", 1, "How do I reset my VPN password?", None, b"x", visibility=Visibility.everything()
            )
            is False
        )
        assert (
            await cache.lookup(
                "acme", 1, "How can I reset the password for my VPN?", visibility=Visibility.everything()
            )
            is None
        )
        assert cache.stats.errors == 2
        assert redis.failures == 2  # no backoff here: both calls reached for Redis and failed
    finally:
        await redis.aclose()


async def test_lookup_touches_a_bounded_number_of_candidates(
    backend: RedisBackend, embeddings: USEEmbeddings, redis: Redis, prefix: str, calibration: Calibration
) -> None:
    settings = SemanticCacheSettings(max_candidates=16, bucket_cap=8)
    cache = SemanticCache(settings, backend, embeddings, prefix=prefix, threshold=calibrated(calibration))
    topics = ["travel", "expense", "leave", "laptop", "security", "parking", "payroll", "training", "badge", "VPN"]
    teams = ["sales", "legal", "finance", "engineering", "design"]
    questions = [
        f"What is the {topic} policy for the {team} team in office {n}?"
        for topic in topics
        for team in teams
        for n in range(10)
    ]
    assert len(questions) == 500
    vectors = embeddings.embed_array(questions)
    for question, vector in zip(questions, vectors, strict=True):
        await cache.store("acme", 1, question, vector, b"x", visibility=Visibility.everything())
    await cache.lookup(
        "acme", 1, "What is the travel policy for the sales team in office 3 and 4?", visibility=Visibility.everything()
    )
    assert cache.stats.last_ids_seen > cache.stats.last_candidates  # more were filed than were fetched
    assert cache.stats.last_candidates <= 16
    assert cache.stats.last_ids_seen <= 24 * 8
    buckets = [key async for key in redis.scan_iter(match=f"{prefix}:sem:acme:v1:rall:any:h*", count=1000)]
    assert max([await redis.zcard(key) for key in buckets]) <= 8  # buckets are trimmed as they fill
