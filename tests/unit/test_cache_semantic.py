"""The semantic cache over the in-process backend: LSH, keys, threshold, guard, TTLs and degradation."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from gateway.cache.backend import MemoryBackend
from gateway.cache.contrast import Contrast
from gateway.cache.semantic import (
    HyperplaneLSH,
    QueryCentre,
    SemanticCache,
    SemanticHit,
    SimilarityThreshold,
    semantic_scope,
)
from gateway.providers.embeddings import USEEmbeddings
from gateway.settings import SemanticCacheSettings
from pipelines.shared.visibility import Visibility
from routes.calibration import Calibration
from tests.unit.test_cache_backend import FakeClock
from tests.unit.test_cache_exact import FlakyMemory

DIM = 64


def unit(seed: int, dim: int = DIM) -> np.ndarray:
    vector = np.random.default_rng(seed).standard_normal(dim).astype(np.float32)
    normalised: np.ndarray = vector / np.linalg.norm(vector)
    return normalised


def near(vector: np.ndarray, cosine: float, seed: int = 99) -> np.ndarray:
    """A unit vector at exactly ``cosine`` from ``vector``."""
    noise = unit(seed, vector.shape[0])
    orthogonal = noise - (noise @ vector) * vector
    assert np.linalg.norm(orthogonal) > 1e-3, "noise seed collides with the vector"
    orthogonal /= np.linalg.norm(orthogonal)
    result: np.ndarray = cosine * vector + np.sqrt(1 - cosine**2) * orthogonal
    return result


# The synthetic vectors' tests set their own cosines, so they set the threshold they are read against too.
SYNTHETIC_THRESHOLD = 0.87


def make(
    backend: MemoryBackend | None = None,
    settings: SemanticCacheSettings | None = None,
    *,
    threshold: float = SYNTHETIC_THRESHOLD,
    **kwargs: Any,
) -> SemanticCache:
    store = backend if backend is not None else MemoryBackend()  # an empty MemoryBackend is falsy (len 0)
    cosine = SimilarityThreshold(threshold)
    return SemanticCache(settings or SemanticCacheSettings(), store, None, prefix="t", threshold=cosine, **kwargs)


def test_lsh_is_deterministic_per_seed() -> None:
    vector = unit(1)
    first, again = HyperplaneLSH(DIM, 8, 12, seed=7), HyperplaneLSH(DIM, 8, 12, seed=7)
    assert first.band_values(vector) == again.band_values(vector)
    assert HyperplaneLSH(DIM, 8, 12, seed=8).band_values(vector) != first.band_values(vector)
    assert all(0 <= value < 2**12 for value in first.band_values(vector))
    assert len(first.band_values(vector)) == 8


@pytest.mark.parametrize("cosine", [1.01, -1.5])
def test_a_threshold_is_a_cosine(cosine: float) -> None:
    with pytest.raises(ValueError, match="cosine"):
        SimilarityThreshold(cosine)


def test_lsh_files_close_vectors_together_and_far_ones_apart() -> None:
    lsh = HyperplaneLSH(DIM, 24, 12)
    base = lsh.band_values(unit(1))
    # Noise seeds must differ from the base's seed 1: noise equal to the base has no orthogonal part.
    close = [
        sum(a == b for a, b in zip(base, lsh.band_values(near(unit(1), 0.98, s)), strict=True)) for s in range(20, 40)
    ]
    far = [sum(a == b for a, b in zip(base, lsh.band_values(unit(s)), strict=True)) for s in range(100, 120)]
    assert min(close) >= 1  # a near-duplicate always shares at least one bucket
    assert sum(close) / len(close) > 5 * max(sum(far) / len(far), 0.1)


def cone(n: int, axis: np.ndarray, cosine: float, seed: int = 500) -> list[np.ndarray]:
    """``n`` unit vectors at ``cosine`` from ``axis`` in random directions around it: questions of an embedder whose
    vectors crowd one direction (e5's unrelated questions sit at ~0.76 of each other)."""
    return [near(axis, cosine, seed + i) for i in range(n)]


def test_a_centre_splits_a_narrow_cone_that_planes_through_the_origin_do_not() -> None:
    axis = unit(1)
    vectors = cone(200, axis, 0.87)
    centre = np.mean(vectors, axis=0).astype(np.float32)
    origin, centred = HyperplaneLSH(DIM, 24, 12), HyperplaneLSH(DIM, 24, 12, centre=centre)

    def crowd(lsh: HyperplaneLSH) -> float:
        """The mean, over bands, of the largest bucket's share of the vectors."""
        bands = np.asarray([lsh.band_values(v) for v in vectors])
        return float(np.mean([np.unique(column, return_counts=True)[1].max() / len(vectors) for column in bands.T]))

    assert crowd(origin) > 4 * crowd(centred)
    assert crowd(centred) < 0.05
    # Through the centre a paraphrase still shares buckets with its question.
    base = centred.band_values(vectors[0])
    close = [
        sum(a == b for a, b in zip(base, centred.band_values(near(vectors[0], 0.99, s)), strict=True))
        for s in range(20, 40)
    ]
    assert min(close) >= 1


def test_a_centre_of_other_dimensions_is_refused() -> None:
    with pytest.raises(ValueError, match="dimensions"):
        HyperplaneLSH(DIM, 4, 12, centre=np.zeros(DIM + 1, dtype=np.float32))


def test_vectors_of_other_dimensions_than_the_centre_hash_from_the_origin() -> None:
    """A centre fitted for another embedder never fails a lookup: those vectors hash as without a centre."""
    centred = make(centre=QueryCentre.of(tuple(float(x) for x in 0.5 * unit(3, DIM + 1))))
    keys = centred.bucket_keys("acme", 1, unit(1), visibility=Visibility.everything())
    assert keys == make().bucket_keys("acme", 1, unit(1), visibility=Visibility.everything())


def test_bucket_keys_name_the_centre_they_were_hashed_from() -> None:
    """Entries hashed from one centre are unreachable from another (a new calibration), never misread."""
    centre = QueryCentre.of(tuple(float(x) for x in 0.5 * unit(3)))
    other = QueryCentre.of(tuple(float(x) for x in 0.5 * unit(4)))
    assert QueryCentre.of(()) == QueryCentre()
    keys = {
        c.tag: make(centre=c).bucket_keys("acme", 1, unit(1), visibility=Visibility.everything())
        for c in (QueryCentre(), centre, other)
    }
    assert len(keys) == 3
    assert all(set(a).isdisjoint(b) for a in keys.values() for b in keys.values() if a is not b)


async def test_a_centred_cache_serves_a_paraphrase_within_a_crowded_cone() -> None:
    axis = unit(1)
    questions = cone(300, axis, 0.87)
    centre = QueryCentre.of(tuple(float(x) for x in np.mean(questions, axis=0)))
    settings = SemanticCacheSettings(max_candidates=16, bucket_cap=32)
    cache = make(MemoryBackend(max_entries=100_000, max_bytes=1 << 30), settings, threshold=0.97, centre=centre)
    for i, vector in enumerate(questions):
        await cache.store(
            "acme", 1, f"question {i}", vector, f"answer {i}".encode(), visibility=Visibility.everything()
        )
    served = 0
    for i in range(0, 300, 15):
        hit = await cache.lookup(
            "acme", 1, f"paraphrase {i}", near(questions[i], 0.99, 7000 + i), visibility=Visibility.everything()
        )
        served += hit is not None and hit.matched_query == f"question {i}"
        assert cache.stats.last_ids_seen <= 16  # the buckets alone bound what a lookup reads, not the cap
    assert served == 20


def test_lsh_rejects_impossible_shapes() -> None:
    with pytest.raises(ValueError, match="bits per band"):
        HyperplaneLSH(DIM, 4, 63)


def test_bucket_keys_carry_prefix_tenant_version_and_scope() -> None:
    cache = make(settings=SemanticCacheSettings(bands=6, bits_per_band=10))
    keys = cache.bucket_keys("acme", 42, unit(1), visibility=Visibility.everything())
    assert len(keys) == 6
    assert all(key.startswith("t:sem:acme:v42:rall:any:h6x10d64s0o:b") for key in keys)
    # Another reader's entries are filed apart: a paraphrase never reaches a reader of other documents.
    hr = Visibility.of(["hr"], unset_open=True)
    assert set(keys).isdisjoint(cache.bucket_keys("acme", 42, unit(1), visibility=hr))
    assert all(f":v42:r{hr.key()}:any:" in key for key in cache.bucket_keys("acme", 42, unit(1), visibility=hr))
    assert set(keys).isdisjoint(cache.bucket_keys("globex", 42, unit(1), visibility=Visibility.everything()))
    assert set(keys).isdisjoint(cache.bucket_keys("acme", 43, unit(1), visibility=Visibility.everything()))
    assert set(keys).isdisjoint(
        cache.bucket_keys(
            "acme", 42, unit(1), scope=semantic_scope("auto", {"top_k": 4}), visibility=Visibility.everything()
        )
    )
    assert keys == cache.bucket_keys("acme", 42, unit(1), visibility=Visibility.everything())
    with pytest.raises(ValueError, match="tenant"):
        cache.bucket_keys("acme:v1", 42, unit(1), visibility=Visibility.everything())


def test_scope_is_canonical() -> None:
    assert semantic_scope("auto", {"top_k": 4, "b": True}) == semantic_scope("auto", {"b": True, "top_k": 4})
    assert semantic_scope("auto", {"top_k": 4}) != semantic_scope("auto", {"top_k": 5})


async def test_hit_above_threshold_and_miss_below() -> None:
    cache = make(threshold=0.9)
    stored = unit(1)
    await cache.store("acme", 1, "Where is the VPN guide?", stored, b"answer", visibility=Visibility.everything())
    hit = await cache.lookup(
        "acme", 1, "Where can I find the VPN guide?", near(stored, 0.95), visibility=Visibility.everything()
    )
    assert isinstance(hit, SemanticHit)
    assert (hit.payload, hit.matched_query) == (b"answer", "Where is the VPN guide?")
    assert hit.similarity == pytest.approx(0.95, abs=1e-3)
    assert (
        await cache.lookup(
            "acme", 1, "Where can I find the VPN guide?", near(stored, 0.85), visibility=Visibility.everything()
        )
        is None
    )
    assert (cache.stats.hits, cache.stats.misses, cache.stats.stores) == (1, 1, 1)


async def test_guard_refuses_a_reversal_however_close() -> None:
    backend = MemoryBackend()
    cache = make(backend, threshold=0.9)
    vector = unit(1)
    await cache.store(
        "acme", 1, "Who joined the company before Alice?", vector, b"before", visibility=Visibility.everything()
    )
    assert (
        await cache.lookup("acme", 1, "Who joined the company after Alice?", vector, visibility=Visibility.everything())
        is None
    )
    assert cache.stats.rejected == 1
    assert cache.stats.last_rejection is not None
    assert cache.stats.last_rejection.rule == "direction_differs"
    unguarded = make(backend, threshold=0.9, guard=None)
    hit = await unguarded.lookup(
        "acme", 1, "Who joined the company after Alice?", vector, visibility=Visibility.everything()
    )
    assert hit is not None  # exactly the GPTCache issue 694 failure the guard exists for
    assert hit.payload == b"before"


async def test_a_refused_best_match_falls_back_to_the_next_acceptable_one() -> None:
    cache = make(threshold=0.9)
    query = unit(1)
    await cache.store(
        "acme", 1, "What were our sales in Q3 2023?", near(query, 0.99, 5), b"2023", visibility=Visibility.everything()
    )
    await cache.store(
        "acme", 1, "How much did we sell in Q3 2024?", near(query, 0.93, 6), b"2024", visibility=Visibility.everything()
    )
    hit = await cache.lookup("acme", 1, "What were our sales in Q3 2024?", query, visibility=Visibility.everything())
    assert hit is not None
    assert hit.payload == b"2024"
    assert cache.stats.rejected == 1


async def test_custom_guard_is_used() -> None:
    calls: list[tuple[str, str]] = []

    def refuse_all(query: str, candidate: str) -> Contrast:
        calls.append((query, candidate))
        return Contrast("custom", "no")

    cache = make(guard=refuse_all)
    await cache.store("acme", 1, "a question", unit(1), b"x", visibility=Visibility.everything())
    assert await cache.lookup("acme", 1, "another question", unit(1), visibility=Visibility.everything()) is None
    assert calls == [("another question", "a question")]


async def test_tenants_versions_and_scopes_are_isolated() -> None:
    cache = make()
    await cache.store(
        "acme", 1, "Where is the VPN guide?", unit(1), b"acme", scope="auto:{}", visibility=Visibility.everything()
    )
    assert (
        await cache.lookup(
            "acme", 1, "Where's the VPN guide?", unit(1), scope="auto:{}", visibility=Visibility.everything()
        )
        is not None
    )
    assert (
        await cache.lookup(
            "globex", 1, "Where's the VPN guide?", unit(1), scope="auto:{}", visibility=Visibility.everything()
        )
        is None
    )
    assert (
        await cache.lookup(
            "acme", 2, "Where's the VPN guide?", unit(1), scope="auto:{}", visibility=Visibility.everything()
        )
        is None
    )
    assert (
        await cache.lookup(
            "acme", 1, "Where's the VPN guide?", unit(1), scope="direct:{}", visibility=Visibility.everything()
        )
        is None
    )


async def test_storing_the_same_question_replaces_its_entry() -> None:
    cache = make()
    await cache.store("acme", 1, "Where is the VPN guide?", unit(1), b"old", visibility=Visibility.everything())
    await cache.store("acme", 1, "where is the  VPN guide?", unit(1), b"new", visibility=Visibility.everything())
    hit = await cache.lookup("acme", 1, "Where's the VPN guide?", unit(1), visibility=Visibility.everything())
    assert hit is not None
    assert hit.payload == b"new"
    assert cache.stats.last_candidates == 1


async def test_entries_expire_with_their_ttl() -> None:
    clock = FakeClock()
    cache = make(MemoryBackend(clock=clock), ttl_s=60)
    await cache.store("acme", 1, "Where is the VPN guide?", unit(1), b"x", visibility=Visibility.everything())
    await cache.store("acme", 1, "Where is the HR guide?", unit(2), b"y", ttl_s=600, visibility=Visibility.everything())
    clock.now += 61
    assert await cache.lookup("acme", 1, "Where's the VPN guide?", unit(1), visibility=Visibility.everything()) is None
    assert (
        await cache.lookup("acme", 1, "Where's the HR guide?", unit(2), visibility=Visibility.everything()) is not None
    )
    assert not await cache.store("acme", 1, "never cached", unit(3), b"z", ttl_s=0, visibility=Visibility.everything())


async def test_backend_failure_is_a_miss_and_a_failed_store() -> None:
    backend = FlakyMemory()
    cache = make(backend)
    await cache.store("acme", 1, "Where is the VPN guide?", unit(1), b"x", visibility=Visibility.everything())
    backend.down = True
    assert await cache.lookup("acme", 1, "Where's the VPN guide?", unit(1), visibility=Visibility.everything()) is None
    assert (
        await cache.store("acme", 1, "Where is the HR guide?", unit(2), b"y", visibility=Visibility.everything())
        is False
    )
    assert cache.stats.errors == 2
    backend.down = False
    assert (
        await cache.lookup("acme", 1, "Where's the VPN guide?", unit(1), visibility=Visibility.everything()) is not None
    )


async def test_embedding_failure_is_a_miss() -> None:
    async def broken(_: str) -> np.ndarray:
        raise RuntimeError("model gone")

    cache = SemanticCache(
        SemanticCacheSettings(), MemoryBackend(), broken, prefix="t", threshold=SimilarityThreshold(SYNTHETIC_THRESHOLD)
    )
    assert await cache.lookup("acme", 1, "anything", visibility=Visibility.everything()) is None
    assert await cache.store("acme", 1, "anything", None, b"x", visibility=Visibility.everything()) is False
    assert cache.stats.errors == 2


async def test_a_vector_is_required_without_an_embedder() -> None:
    with pytest.raises(ValueError, match="embed"):
        await make().lookup("acme", 1, "anything", visibility=Visibility.everything())


async def test_lookup_cost_is_bounded_as_the_cache_grows() -> None:
    cache = make(
        MemoryBackend(max_entries=100_000, max_bytes=1 << 30),
        SemanticCacheSettings(max_candidates=16, bucket_cap=8, bands=6),
    )
    base = unit(1)
    for i in range(500):  # all close to each other: every bucket of the query is crowded
        await cache.store(
            "acme", 1, f"question number {i}", near(base, 0.9, seed=1000 + i), b"x", visibility=Visibility.everything()
        )
    await cache.lookup("acme", 1, "question number 5000", base, visibility=Visibility.everything())
    assert cache.stats.last_ids_seen <= 6 * 8
    assert cache.stats.last_ids_seen > 16
    assert cache.stats.last_candidates == 16


async def test_real_embeddings_serve_a_paraphrase_and_refuse_a_reversal(
    embeddings: USEEmbeddings, calibration: Calibration
) -> None:
    threshold = calibration.semantic_threshold
    cache = SemanticCache(
        SemanticCacheSettings(), MemoryBackend(), embeddings, prefix="t", threshold=SimilarityThreshold(threshold)
    )
    everything = Visibility.everything()
    await cache.store("acme", 1, "How do I reset my VPN password?", None, b"vpn", visibility=everything)
    await cache.store("acme", 1, "Who joined the company before Alice?", None, b"before", visibility=everything)
    hit = await cache.lookup("acme", 1, "How can I reset the password for my VPN?", visibility=everything)
    assert hit is not None
    assert hit.payload == b"vpn"
    assert hit.similarity >= threshold
    assert await cache.lookup("acme", 1, "Who joined the company after Alice?", visibility=everything) is None
    assert cache.stats.rejected == 1


async def test_langchain_style_embedder_is_accepted() -> None:
    class Embedder:
        async def aembed_query(self, text: str) -> list[float]:
            return [float(x) for x in unit(len(text))]

    threshold = SimilarityThreshold(SYNTHETIC_THRESHOLD)
    cache = SemanticCache(
        SemanticCacheSettings(), MemoryBackend(), Embedder(), prefix="t", guard=None, threshold=threshold
    )
    await cache.store("acme", 1, "abc", None, b"x", visibility=Visibility.everything())
    # same length -> same vector in this fake
    assert await cache.lookup("acme", 1, "xyz", visibility=Visibility.everything()) is not None


def test_the_served_cache_hashes_from_the_calibrations_centre(
    embeddings: USEEmbeddings, calibration: Calibration
) -> None:
    """The cache the gateway opens reads its centre from the calibration fitted for the embedder in use."""
    from gateway.cache import open_cache, open_semantic_cache
    from gateway.settings import CacheSettings

    assert len(calibration.query_centre) == 512
    settings = SemanticCacheSettings(enabled=True)
    cache = open_semantic_cache(open_cache(None, CacheSettings()), settings, embeddings, calibration)
    assert cache is not None
    vector = unit(1, 512)
    keys = cache.bucket_keys("acme", 1, vector, visibility=Visibility.everything())
    tag = QueryCentre.of(calibration.query_centre).tag
    assert tag.startswith("c")
    assert all(f"s0{tag}:b" in key for key in keys)
    centred = HyperplaneLSH(
        512, settings.bands, settings.bits_per_band, centre=np.asarray(calibration.query_centre, dtype=np.float32)
    )
    assert [key.rsplit(":", 1)[1] for key in keys] == [f"{v:03x}" for v in centred.band_values(vector)]
