"""Decision latency of the knowledge-aware router, probe search included, query embedding excluded.

    python -m tests.benchmarks.route_decision_latency [--chunks 10000] [--n 300] [--redis-url redis://...]

Fills one tenant of the embedded LanceDB store (a temporary directory) with ``--chunks`` chunks, 20
per document, through the store's own API: the HotpotQA passages of ``routes/data`` with their real
embeddings, and filler chunks (random text, random unit vectors) up to the total. Then times
``FrontRouter.decide(..., "auto")`` -- the tenant probe (``KnowledgeBase.dense_search`` with the
precomputed query vector, as deep as the gateway's default settings make it), the signals and both
models -- for EN and JA questions whose vectors are computed beforehand, and prints p50/p95 of the
whole decision and of the probe search alone:

1. the store searched (LanceDB's exact scan) as the writes left the table, then after compacting it;
2. the tenant's in-memory matrix (:mod:`gateway.knowledge.matrices`), with its knowledge version read per
   probe from ``--redis-url`` (as the gateway does with Redis) or from the in-process backend; its
   size, and how many decisions differ from the store's.

A figure-printing script, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import numpy as np

from gateway.cache.backend import CacheBackend, MemoryBackend, RedisBackend
from gateway.cache.versions import KnowledgeVersions
from gateway.knowledge.chunking import Chunker
from gateway.knowledge.matrices import TenantMatrices
from gateway.knowledge.service import DenseSearch, KnowledgeBase
from gateway.providers.embeddings import USE_DIMENSIONS, USEEmbeddings
from gateway.providers.llm import LLMClient
from gateway.providers.redis import ResilientRedis, open_redis
from gateway.providers.vectorstores.base import ChunkRecord
from gateway.providers.vectorstores.lance import LanceVectorStore
from gateway.query.factory import probe_depth
from gateway.query.router_artefact import train_knowledge_router
from gateway.settings import ModelPrice, RedisSettings, Settings
from pipelines.shared.visibility import Visibility
from routes.corpus import load_tenants
from routes.examples import load_examples
from routes.knowledge_router import KnowledgeRouter
from routes.llm_router import LLMRouter
from routes.probe import PROBE_DEPTH
from routes.router import FrontRouter
from routes.written_kb import load_written_kb
from tests.benchmarks.figures import percentile
from tests.fakes.scripted_chat import ScriptedChatModel

TENANT = "bench"
CHUNKS_PER_DOC = 20
WARM_UP = 20
FILLER_WORDS = np.asarray(
    [
        "the",
        "of",
        "report",
        "quarterly",
        "meeting",
        "budget",
        "north",
        "river",
        "season",
        "market",
        "update",
        "figure",
        "table",
        "annex",
        "note",
        "draft",
        "review",
        "harbour",
        "engine",
        "signal",
        "garden",
        "letter",
        "station",
        "winter",
        "paper",
        "bridge",
        "council",
        "archive",
    ]
)


def _questions() -> list[str]:
    """Questions about the tenant's passages (HotpotQA), others it holds nothing on (EN/JA), greetings."""
    hotpot = [e.text for e in load_examples() if e.source == "hotpotqa"][:30]
    kb = load_written_kb()
    return hotpot + [q.question for q in kb.questions[::14]] + ["Hello! How are you today?", "こんにちは！"]


def _filler(rng: np.random.Generator, n: int) -> str:
    return " ".join(rng.choice(FILLER_WORDS, size=n))


async def _fill(store: LanceVectorStore, embeddings: USEEmbeddings, chunks: int) -> int:
    """The HotpotQA passages with their real embeddings, then filler chunks (random text and random unit
    vectors, far from every question) up to ``chunks``: the search scans or indexes the whole tenant,
    and the probe finds the passages a real tenant would hold. Returns the number of real passages."""
    passages = list(load_tenants()["hotpotqa"].documents)
    vectors = [v.tolist() for v in embeddings.embed_array([f"{p.title}\n{p.text}" for p in passages])]
    rng = np.random.default_rng(13)
    records = [ChunkRecord("", 0, p.title, p.text, v) for p, v in zip(passages, vectors, strict=True)]
    while len(records) < chunks:
        vector = rng.normal(size=USE_DIMENSIONS)
        vector /= np.linalg.norm(vector)
        records.append(ChunkRecord("", 0, "Filler", _filler(rng, 90), vector.tolist()))
    order = rng.permutation(len(records))
    for doc in range(0, len(records), CHUNKS_PER_DOC):
        doc_id = f"doc-{doc // CHUNKS_PER_DOC}"
        batch = [records[int(i)] for i in order[doc : doc + CHUNKS_PER_DOC]]
        rows = [ChunkRecord(doc_id, i, r.title, r.text, r.vector) for i, r in enumerate(batch)]
        await store.replace_document(TENANT, doc_id, rows)
    return len(passages)


async def _time(router: FrontRouter, knowledge: KnowledgeBase, vectors: list[list[float]], n: int) -> list[str]:
    """Prints the figures; returns the route of each distinct question (to compare two set-ups)."""
    questions = _questions()
    decide: list[float] = []
    search: list[float] = []
    routes: dict[str, int] = {}
    decided: list[str] = [""] * len(questions)
    for i in range(WARM_UP + n):
        query, vector = questions[i % len(questions)], vectors[i % len(questions)]
        t0 = time.perf_counter()
        decision, _ = await router.decide(query, "auto", vector, TENANT, visibility=Visibility.everything())
        t1 = time.perf_counter()
        await knowledge.dense_search(TENANT, query, router.depth, vector=vector, visibility=Visibility.everything())
        t2 = time.perf_counter()
        decided[i % len(questions)] = decision.route
        if i >= WARM_UP:
            decide.append((t1 - t0) * 1000)
            search.append((t2 - t1) * 1000)
            routes[decision.route] = routes.get(decision.route, 0) + 1
    print(f"decisions: {n} ({len(questions)} distinct EN/JA questions), probe depth {router.depth}, routes {routes}")
    print("| measured | p50 ms | p95 ms | mean ms |\n|---|---|---|---|")
    for name, values in (("decision (probe search + signals + models)", decide), ("probe search alone", search)):
        p50, p95 = percentile(values, 50), percentile(values, 95)
        print(f"| {name} | {p50:.2f} | {p95:.2f} | {statistics.fmean(values):.2f} |")
    return decided


async def _backend(redis_url: str | None) -> tuple[CacheBackend, ResilientRedis | None]:
    if redis_url is None:
        return MemoryBackend(), None
    redis = open_redis(RedisSettings(url=redis_url))
    assert redis is not None
    return RedisBackend(redis), redis


async def run(chunks: int, n: int, redis_url: str | None) -> None:
    settings = Settings()
    embeddings = USEEmbeddings()
    vectors = [v.tolist() for v in embeddings.embed_array(_questions())]  # the request's embedding: not timed
    backend, redis = await _backend(redis_url)
    versions = KnowledgeVersions(backend, prefix="bench-route-decision")
    with tempfile.TemporaryDirectory() as tmp:
        store = await LanceVectorStore.open(Path(tmp) / "lancedb", USE_DIMENSIONS)
        started = time.perf_counter()
        real = await _fill(store, embeddings, chunks)
        total = await store.count_chunks(TENANT)
        print(f"tenant: {total} chunks ({real} HotpotQA passages), written in {time.perf_counter() - started:.1f} s")
        chunker = Chunker(settings.chunking.size, settings.chunking.overlap)
        knowledge = KnowledgeBase(embeddings, store, chunker, hybrid=settings.retrieval.hybrid_search)
        model = train_knowledge_router(settings, embeddings.embed_array)
        depth = probe_depth(settings.retrieval, knowledge)
        classifier, llm = KnowledgeRouter(model), LLMRouter(_unused_llm())
        router = FrontRouter(classifier, llm, "logistic", DenseSearch(knowledge), depth)
        table = await store._table(TENANT, create=False)
        assert table is not None
        print("\n1a. the store searched, as the writes left it (the store compacts every 64 writes)")
        await _time(router, knowledge, vectors, n)
        await table.optimize(cleanup_older_than=timedelta(days=0), delete_unverified=True)
        print("\n1b. the store searched, after compacting the tail and dropping old versions")
        from_store = await _time(router, knowledge, vectors, n)
        shallow = FrontRouter(classifier, llm, "logistic", DenseSearch(knowledge), PROBE_DEPTH)
        print(f"\n1c. the same, probing only the {PROBE_DEPTH} passages the signals read (before retrieval reused it)")
        await _time(shallow, knowledge, vectors, n)

        matrices = TenantMatrices(store, versions, settings.vector_store.probe_index_max_mb * 1024 * 1024)
        knowledge.matrices = matrices
        t0 = time.perf_counter()
        assert await matrices.warm(TENANT), "the tenant did not fit the in-memory budget"
        loaded = (time.perf_counter() - t0) * 1000
        size = matrices.sizes()[TENANT]
        vector_mib = size[0] * USE_DIMENSIONS * 4 / 2**20
        where = f"Redis ({redis_url})" if redis_url else "the in-process backend"
        print(f"\n2. the in-memory matrix (knowledge version read from {where} per probe)")
        print(
            f"   {size[0]} chunks, {size[1] / 2**20:.1f} MiB in memory (vectors {vector_mib:.1f} MiB), "
            f"loaded from the store in {loaded:.0f} ms; budget {matrices.max_bytes / 2**20:.0f} MiB"
        )
        from_memory = await _time(router, knowledge, vectors, n)
        changed = sum(a != b for a, b in zip(from_store, from_memory, strict=True))
        print(
            f"   decisions that differ from the store's: {changed} of {len(from_store)} distinct questions; "
            f"probes served from memory {matrices.hits}, from the store {matrices.misses}"
        )
        await matrices.aclose()
        await store.close()
    if redis is not None:
        await redis.aclose()


def _unused_llm() -> LLMClient:
    """The LLM classifier is not timed here; the front router only needs one to exist."""
    return LLMClient(ScriptedChatModel(responder=lambda *_: "{}"), model_name="unused", price=ModelPrice())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunks", type=int, default=10_000)
    parser.add_argument("--n", type=int, default=300)
    parser.add_argument("--redis-url", help="read the knowledge version from this Redis (default: in-process)")
    args = parser.parse_args()
    asyncio.run(run(args.chunks, args.n, args.redis_url))


if __name__ == "__main__":
    main()
