"""What the entity links cost a 10,000-chunk tenant: ingestion, index size, and following them at query time.

    python -m tests.benchmarks.link_index [--chunks 10000] [--n 200]

Writes the same 10,000 chunks twice into the embedded LanceDB store (a temporary directory), through the store's
own API, 20 per document: once with each chunk's ``about`` keys (what the gateway writes) and once without (the
store as it was before links). Chunks are HotpotQA passages cycled to the total (their own titles and texts, so
their names and titles are real; vectors random, the embedding is not what is measured). Prints:

1. ingestion: the ``about`` keys computed for every title, and the store writes, each timed with and without;
2. size: the table directory on disk after compaction, and the in-memory matrix of the tenant, with and without;
3. following the links from 4 seed passages, as hybrid search does: the mention keys read from the seeds, then
   the linked search in LanceDB and in the in-memory matrix (p50/p95 over ``--n`` HotpotQA questions' seeds).

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

from gateway.knowledge.matrices import TenantMatrix
from gateway.providers.embeddings import USE_DIMENSIONS
from gateway.providers.vectorstores.base import ChunkRecord
from gateway.providers.vectorstores.lance import LanceVectorStore
from pipelines.shared.links import about_keys, mention_keys
from pipelines.shared.visibility import Visibility
from routes.corpus import load_tenants

CHUNKS_PER_DOC = 20
SEEDS = 4
LINKED_DEPTH = 24  # what hybrid search asks for at the corrective route's k = 8


def _size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _percentiles(values: list[float]) -> str:
    ms = sorted(v * 1000 for v in values)
    return f"{statistics.median(ms):.2f} / {ms[int(0.95 * (len(ms) - 1))]:.2f}"


async def _write(path: Path, records: list[ChunkRecord]) -> tuple[float, LanceVectorStore]:
    store = await LanceVectorStore.open(path, USE_DIMENSIONS)
    start = time.perf_counter()
    for first in range(0, len(records), CHUNKS_PER_DOC):
        doc_id = f"doc-{first // CHUNKS_PER_DOC}"
        batch = records[first : first + CHUNKS_PER_DOC]
        rows = [ChunkRecord(doc_id, i, r.title, r.text, r.vector, {}, r.about) for i, r in enumerate(batch)]
        await store.replace_document("bench", doc_id, rows)
    elapsed = time.perf_counter() - start
    table = await store._table("bench", create=False)  # the benchmark compacts its own table, as others here do
    assert table is not None
    await table.optimize(cleanup_older_than=timedelta(days=0), delete_unverified=True)
    return elapsed, store


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunks", type=int, default=10_000)
    parser.add_argument("--n", type=int, default=200)
    args = parser.parse_args()
    passages = list(load_tenants()["hotpotqa"].documents)
    rng = np.random.default_rng(13)
    titles = [passages[i % len(passages)].title for i in range(args.chunks)]
    texts = [passages[i % len(passages)].text for i in range(args.chunks)]
    vectors = rng.normal(size=(args.chunks, USE_DIMENSIONS)).astype(np.float32)
    about_keys.cache_clear()
    start = time.perf_counter()
    about = [tuple(sorted(about_keys(t))) for t in titles]
    keys_s = time.perf_counter() - start
    with_links = [
        ChunkRecord("", 0, t, x, v.tolist(), {}, a) for t, x, v, a in zip(titles, texts, vectors, about, strict=True)
    ]
    without = [ChunkRecord("", 0, t, x, v.tolist()) for t, x, v in zip(titles, texts, vectors, strict=True)]
    print(f"{args.chunks} chunks ({len(passages)} distinct HotpotQA passages), {CHUNKS_PER_DOC} per document")
    print(f"about keys for every title: {keys_s * 1000:.1f} ms ({sum(map(len, about)) / len(about):.2f} keys a chunk)")
    with tempfile.TemporaryDirectory() as tmp:
        sizes, stores = {}, {}
        print("\n| store | write s | table on disk MiB | in-memory matrix MiB |\n|---|---|---|---|")
        for name, records in (("without links", without), ("with links", with_links)):
            path = Path(tmp) / name.replace(" ", "-")
            elapsed, store = await _write(path, records)
            exported = await store.export_chunks("bench")
            assert exported is not None
            matrix = TenantMatrix.of(0, exported)
            sizes[name] = _size(path)
            stores[name] = (store, matrix)
            print(f"| {name} | {elapsed:.1f} | {sizes[name] / 2**20:.2f} | {matrix.nbytes / 2**20:.2f} |")
        print(f"the links add {(sizes['with links'] - sizes['without links']) / 1024:.0f} KiB on disk")
        store, matrix = stores["with links"]
        seeds_of = [rng.choice(len(passages), size=SEEDS, replace=False) for _ in range(args.n)]
        mention, lance, memory, found = [], [], [], []
        for seeds in seeds_of:
            vector = rng.normal(size=USE_DIMENSIONS).tolist()
            mention_keys.cache_clear()
            t0 = time.perf_counter()
            keys: set[str] = set()
            own: set[str] = set()
            for i in seeds:
                keys |= mention_keys(passages[int(i)].text)
                own |= about_keys(passages[int(i)].title)
            wanted = sorted(keys - own)
            t1 = time.perf_counter()
            hits = await store.linked_search("bench", wanted, vector, LINKED_DEPTH, visibility=Visibility.everything())
            t2 = time.perf_counter()
            matrix.linked(wanted, vector, LINKED_DEPTH, Visibility.everything())
            t3 = time.perf_counter()
            mention.append(t1 - t0)
            lance.append(t2 - t1)
            memory.append(t3 - t2)
            found.append(len({p.doc_id for p in hits}))
        print(f"\nfollowing the links of {SEEDS} seeds, {args.n} times (p50 / p95 ms):")
        print("| step | p50 / p95 ms |\n|---|---|")
        print(f"| mention keys of the seeds (uncached) | {_percentiles(mention)} |")
        print(f"| linked search, LanceDB | {_percentiles(lance)} |")
        print(f"| linked search, in-memory matrix | {_percentiles(memory)} |")
        print(f"linked documents found per search: median {statistics.median(found):.0f} (of up to {LINKED_DEPTH})")


if __name__ == "__main__":
    asyncio.run(main())
