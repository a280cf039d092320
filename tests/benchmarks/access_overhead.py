"""What document permissions cost an ``auto`` query, and what sharing tenant-open answers would win the cache.

    python -m tests.benchmarks.access_overhead [--chunks 10000] [--n 300] [--requests 3000] [--unsettled]

Fills one tenant of the embedded LanceDB store (a temporary directory) with ``--chunks`` chunks, 20 per document:
the HotpotQA passages of ``routes/data`` with their real embeddings, then filler chunks (random text, random unit
vectors) up to the total. Documents are tagged as a permissioned tenant would be: four in ten open to the whole
tenant, the rest spread over five groups (``g0``..``g4``). The tenant is then settled (its last writes folded into
its indexes, as the store does once writes pause) unless ``--unsettled`` measures it right after the burst.

1. **Added latency.** For EN/JA questions whose vectors are computed beforehand (the embedding is not what access
   changes), times the retrieval work of an ``auto`` request: the router's decision (its probe, the signals, the
   model) and the first retrieval served from the probe (``ProbeFirstRetriever``: the keyword half and the links,
   pre-filtered in LanceDB), for a reader who sees everything, a reader of one group (who sees about half the
   chunks) and a reader of every group (filtered, yet allowed every chunk: the filter's own cost), in a random
   order per request, after every question was asked once by each. Both with the tenant's in-memory matrix warm
   (how the gateway serves a tenant with Redis) and with the store alone (no matrix: a cold tenant, or Pinecone's
   shape of search).
2. **Cache hit rate.** A replayed workload: ``--requests`` questions drawn (Zipf, s=1.1) from the question pool by
   readers of one group each (uniform over the five). Each reader's answer rests on their own top-4 passages (the
   real search above). Keyed by visibility (what the gateway does) a request hits when the same question was asked
   by a reader of the same group before; sharing tenant-open answers (not done) would also serve an answer whose
   four sources are all tenant-open to any reader (never a leak, but another reader's own search may have found
   better passages of their group: a different answer), or, stricter, only to a reader whose own top-4 is those
   same passages (their own answer, but known only after their search). A key-level replay, not the cache itself:
   it counts what each keying policy could serve.

A figure-printing script, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from gateway.cache.backend import MemoryBackend
from gateway.cache.versions import KnowledgeVersions
from gateway.knowledge.chunking import Chunker
from gateway.knowledge.matrices import TenantMatrices
from gateway.knowledge.service import DenseSearch, KnowledgeBase
from gateway.providers.embeddings import USE_DIMENSIONS, USEEmbeddings
from gateway.providers.llm import LLMClient
from gateway.providers.vectorstores.base import ChunkRecord
from gateway.providers.vectorstores.lance import SETTLE_AFTER_S, LanceVectorStore
from gateway.query.factory import probe_depth
from gateway.query.router_artefact import train_knowledge_router
from gateway.settings import ModelPrice, Settings
from pipelines.shared.visibility import TENANT_OPEN, Visibility
from routes.corpus import load_tenants
from routes.examples import load_examples
from routes.knowledge_router import KnowledgeRouter
from routes.llm_router import LLMRouter
from routes.probe import ProbeFirstRetriever
from routes.router import FrontRouter
from routes.written_kb import load_written_kb
from tests.benchmarks.figures import percentile
from tests.fakes.scripted_chat import ScriptedChatModel

TENANT = "bench"
CHUNKS_PER_DOC = 20
GROUPS = 5
TOP_K = 4
WORDS = np.asarray(["report", "quarterly", "budget", "river", "market", "annex", "harbour", "signal", "station"])


def questions() -> list[str]:
    """Questions about the tenant's passages (HotpotQA), others it holds nothing on (EN/JA)."""
    hotpot = [e.text for e in load_examples() if e.source == "hotpotqa"][:150]
    kb = load_written_kb()
    return hotpot + [q.question for q in kb.questions[::10]]


def access_of(doc: int) -> tuple[str, ...]:
    return (TENANT_OPEN,) if doc % 10 < 4 else (f"g{doc % GROUPS}",)


async def fill(store: LanceVectorStore, embeddings: USEEmbeddings, chunks: int) -> int:
    passages = list(load_tenants()["hotpotqa"].documents)
    vectors = [v.tolist() for v in embeddings.embed_array([f"{p.title}\n{p.text}" for p in passages])]
    rng = np.random.default_rng(13)
    records = [(p.title, p.text, v) for p, v in zip(passages, vectors, strict=True)]
    while len(records) < chunks:
        vector = rng.normal(size=USE_DIMENSIONS)
        vector /= np.linalg.norm(vector)
        records.append(("Filler", " ".join(rng.choice(WORDS, size=90)), vector.tolist()))
    order = rng.permutation(len(records))
    for start in range(0, len(records), CHUNKS_PER_DOC):
        doc = start // CHUNKS_PER_DOC
        rows = [
            ChunkRecord(f"doc-{doc}", i, *records[int(j)], access=access_of(doc))
            for i, j in enumerate(order[start : start + CHUNKS_PER_DOC])
        ]
        await store.replace_document(TENANT, f"doc-{doc}", rows)
    return len(passages)


Timings = dict[str, list[tuple[int, float]]]  # reader -> (question, milliseconds) per request


async def time_auto(
    router: FrontRouter, knowledge: KnowledgeBase, asked: list[str], vectors: list[list[float]], n: int
) -> Timings:
    """Milliseconds per ``auto`` request's decision and first retrieval, per reader kind, the two alternating."""
    readers = {
        "everything": Visibility.everything(),
        "one group": Visibility.of(["g1"], unset_open=False),
        # Filtered, yet allowed every chunk: the filter's own cost, without the smaller candidate set.
        "every group": Visibility.of([f"g{g}" for g in range(GROUPS)], unset_open=False),
    }
    timings: Timings = {name: [] for name in readers}
    # Each request's readers in a fresh random order. A rotation by request number would be tied to the question
    # whenever the number of questions is a multiple of the readers' (114 and 3): the same reader would then
    # always ask a given question first, and every per-question difference would carry that order's cost.
    rng = np.random.default_rng(29)
    warm_up = len(asked)  # every question asked once by every reader before any is timed
    for i in range(warm_up + n):
        q = i % len(asked)
        query, vector = asked[q], vectors[q]
        names = [str(name) for name in rng.permutation(list(readers))]
        for name in names:
            reader = readers[name]
            t0 = time.perf_counter()
            decision, _ = await router.decide(query, "auto", vector, TENANT, visibility=reader)
            found = await ProbeFirstRetriever(knowledge, decision.probe).search(
                TENANT, query, TOP_K, visibility=reader, vector=vector
            )
            elapsed = (time.perf_counter() - t0) * 1000
            assert found or reader.groups is not None
            if i >= warm_up:
                timings[name].append((q, elapsed))
    return timings


def report(title: str, timings: Timings) -> None:
    """All requests' p50/p95, and each question's fastest request per reader: on a machine other work shares, the
    fastest of a question's requests is the one nothing else delayed, so their difference is access's own cost."""
    print(f"\n{title}\n| reader | p50 ms | p95 ms | mean ms | p50 of each question's fastest, ms |")
    print("|---|---|---|---|---|")
    fastest: dict[str, dict[int, float]] = {}
    for name, samples in timings.items():
        values = [ms for _, ms in samples]
        best: dict[int, float] = {}
        for q, ms in samples:
            best[q] = min(ms, best.get(q, ms))
        fastest[name] = best
        p50, p95 = percentile(values, 50), percentile(values, 95)
        print(
            f"| {name} | {p50:.2f} | {p95:.2f} | {statistics.fmean(values):.2f} | "
            f"{percentile(list(best.values()), 50):.2f} |"
        )
    everything = timings["everything"]
    for name in ("one group", "every group"):
        restricted = timings[name]
        added = percentile([ms for _, ms in restricted], 50) - percentile([ms for _, ms in everything], 50)
        pairs = [r - e for (_, r), (_, e) in zip(restricted, everything, strict=True)]
        best_pairs = [fastest[name][q] - fastest["everything"][q] for q in fastest["everything"]]
        print(
            f"{name}: added p50 (difference of p50s) {added:+.3f} ms; median of per-request differences "
            f"{statistics.median(pairs):+.3f} ms; median of per-question fastest differences "
            f"{statistics.median(best_pairs):+.3f} ms"
        )


async def hit_rates(knowledge: KnowledgeBase, asked: list[str], vectors: list[list[float]], requests: int) -> None:
    """The replay of section 2."""
    groups = [Visibility.of([f"g{g}"], unset_open=False) for g in range(GROUPS)]
    open_only: dict[tuple[int, int], bool] = {}
    sources: dict[tuple[int, int], frozenset[str]] = {}
    for q, (query, vector) in enumerate(zip(asked, vectors, strict=True)):
        for g, reader in enumerate(groups):
            found = await knowledge.search(TENANT, query, TOP_K, visibility=reader, vector=vector)
            tags = {tag for p in found for tag in access_of(int(p.doc_id.split("-")[1]))}
            open_only[(q, g)] = tags <= {TENANT_OPEN}
            sources[(q, g)] = frozenset(p.chunk_id for p in found)
    rng = np.random.default_rng(7)
    weights = 1.0 / np.arange(1, len(asked) + 1) ** 1.1
    draws = rng.choice(len(asked), size=requests, p=weights / weights.sum())
    readers = rng.integers(0, GROUPS, size=requests)
    stream = list(zip(draws.tolist(), readers.tolist(), strict=True))
    hits = replay(stream)

    def naive(q: int, g: int, shared: dict[int, frozenset[str]]) -> bool:
        return q in shared

    def strict(q: int, g: int, shared: dict[int, frozenset[str]]) -> bool:
        return shared.get(q) == sources[(q, g)]

    shared_hits = replay_shared(stream, naive, open_only, sources)
    exact_shared_hits = replay_shared(stream, strict, open_only, sources)
    share = sum(open_only.values()) / len(open_only)
    print(
        f"\n2. cache hit rate over {requests} requests ({len(asked)} questions, Zipf 1.1, {GROUPS} groups): "
        f"keyed by visibility {hits / requests:.3f}; sharing tenant-open answers with every reader "
        f"{shared_hits / requests:.3f}; sharing them only with readers whose own top-{TOP_K} is the same "
        f"{exact_shared_hits / requests:.3f} (answers whose top-{TOP_K} sources are all tenant-open: {share:.2f} of "
        "question x group)"
    )


Served = Callable[[int, int, dict[int, frozenset[str]]], bool]


def replay(stream: list[tuple[int, int]]) -> int:
    """Hits when answers are keyed by visibility: the same question asked before by a reader of the same group."""
    seen: set[tuple[int, int]] = set()
    hits = 0
    for asked in stream:
        if asked in seen:
            hits += 1
        seen.add(asked)
    return hits


def replay_shared(
    stream: list[tuple[int, int]],
    served: Served,
    open_only: dict[tuple[int, int], bool],
    sources: dict[tuple[int, int], frozenset[str]],
) -> int:
    """Hits when, besides each reader's own entries, an answer whose sources are all tenant-open is kept for
    every reader and ``served`` says when another reader may have it."""
    seen: set[tuple[int, int]] = set()
    shared: dict[int, frozenset[str]] = {}  # question -> the sources of its cached open-only answer
    hits = 0
    for q, g in stream:
        if (q, g) in seen or served(q, g, shared):
            hits += 1
            continue
        seen.add((q, g))
        if open_only[(q, g)]:
            shared.setdefault(q, sources[(q, g)])
    return hits


async def run(chunks: int, n: int, requests: int, unsettled: bool) -> None:
    settings = Settings()
    embeddings = USEEmbeddings()
    asked = questions()
    vectors = [v.tolist() for v in embeddings.embed_array(asked)]
    versions = KnowledgeVersions(MemoryBackend(), prefix="bench-access")
    with tempfile.TemporaryDirectory() as tmp:
        # Unsettled: the store's own fold-in switched off, or it would settle the tenant seconds into the timing.
        settle = 0.0 if unsettled else SETTLE_AFTER_S
        store = await LanceVectorStore.open(Path(tmp) / "lancedb", USE_DIMENSIONS, settle_after_s=settle)
        started = time.perf_counter()
        real = await fill(store, embeddings, chunks)
        total = await store.count_chunks(TENANT)
        print(f"tenant: {total} chunks ({real} HotpotQA passages), written in {time.perf_counter() - started:.1f} s")
        if not unsettled:
            started = time.perf_counter()
            await store.settled()
            print(f"settled (last writes folded into the indexes) in {time.perf_counter() - started:.1f} s")
        chunker = Chunker(settings.chunking.size, settings.chunking.overlap)
        knowledge = KnowledgeBase(
            embeddings,
            store,
            chunker,
            versions,
            hybrid=settings.retrieval.hybrid_search,
            links=settings.retrieval.entity_links,
        )
        model = train_knowledge_router(settings, embeddings.embed_array)
        depth = probe_depth(settings.retrieval, knowledge)
        llm = LLMRouter(
            LLMClient(ScriptedChatModel(responder=lambda *_: "{}"), model_name="unused", price=ModelPrice())
        )
        router = FrontRouter(KnowledgeRouter(model), llm, "logistic", DenseSearch(knowledge), depth)
        matrices = TenantMatrices(store, versions, settings.vector_store.probe_index_max_mb * 1024 * 1024)
        knowledge.matrices = matrices
        assert await matrices.warm(TENANT), "the tenant did not fit the in-memory budget"
        print(f"probe depth {depth}, top_k {TOP_K}, {n} requests per reader ({len(asked)} distinct questions)")
        report(
            "1a. in-memory matrix warm (the served set-up with Redis)",
            await time_auto(router, knowledge, asked, vectors, n),
        )
        knowledge.matrices = None
        report(
            "1b. the store alone (LanceDB pre-filters every search)",
            await time_auto(router, knowledge, asked, vectors, n),
        )
        knowledge.matrices = matrices
        await hit_rates(knowledge, asked, vectors, requests)
        await matrices.aclose()
        await store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunks", type=int, default=10_000)
    parser.add_argument("--n", type=int, default=300)
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--unsettled", action="store_true", help="time the tenant right after its writes")
    args = parser.parse_args()
    asyncio.run(run(args.chunks, args.n, args.requests, args.unsettled))


if __name__ == "__main__":
    main()
