"""Supporting-passage recall of retrieval alone: dense, hybrid (dense + BM25, reciprocal rank fusion), hybrid + links.

    python -m tests.benchmarks.retrieval_recall [--data-dir ../shared/data/dev] [--k 4 8 12] [--batched]

No LLM. Each set is ingested as one tenant of the real embedded store (LanceDB in a temporary
directory, the production chunker and embeddings), then every question with gold passages is asked
through :meth:`gateway.knowledge.KnowledgeBase.search` (once per k, as a route asks for its own k) with
hybrid search off, on, and on with the entity links followed (:mod:`pipelines.shared.links`), and a fourth
time as a request runs it: the router's dense probe (from the tenant's in-memory matrix,
as deep as the gateway's default settings make it) and hybrid retrieval with links computed from the probe's
ranking (:meth:`~gateway.knowledge.KnowledgeBase.search_reusing`, "hybrid + links from probe"). Recall@k
is the share of a question's gold documents among the documents of its top-k chunks; "all@k" is the
share of questions with every gold document retrieved (what a two-hop answer needs). Sets: HotpotQA
(bridge and comparison questions over the shared 994-title corpus), the JSQuAD sample (each
paragraph a document) and the written knowledge base (routes/data/written_kb.json, English and
Japanese, single- and multi-hop, with distractors that share words) and the near-miss manuals
(routes/data/near_miss_{en,ja}.json: each question's page beside a neighbouring case's).

``--encoder e5`` embeds with multilingual-e5-small (the gateway's ``e5`` provider, :mod:`gateway.providers.e5`) instead
of USE, to see what swapping the dense encoder does to every mode (see tests/benchmarks/embedder_compare.py).
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from dataclasses import dataclass
from pathlib import Path

from langchain_core.embeddings import Embeddings

from gateway.cache.backend import MemoryBackend
from gateway.cache.versions import KnowledgeVersions
from gateway.knowledge.chunking import Chunker
from gateway.knowledge.matrices import TenantMatrices
from gateway.knowledge.service import KnowledgeBase, NewDocument
from gateway.providers.e5 import E5Embeddings
from gateway.providers.embeddings import USEEmbeddings, embedding_dimensions
from gateway.providers.vectorstores.lance import LanceVectorStore
from gateway.query.factory import probe_depth
from gateway.settings import ChunkingSettings, RetrievalSettings
from pipelines.shared.visibility import Visibility
from routes.offline.eval.datasets import Dataset, load_hotpotqa, load_near_miss, load_squad_v2
from routes.written_kb import load_written_kb

TENANT = "bench"
NEAR_MISS = Path(__file__).resolve().parents[2] / "routes" / "data"


@dataclass(frozen=True)
class RecallSet:
    name: str
    documents: list[NewDocument]
    questions: list[tuple[str, frozenset[str]]]  # question, gold document ids

    @classmethod
    def of(cls, name: str, data: Dataset) -> RecallSet:
        """A loaded dataset as one tenant: its documents, and its questions that have gold documents."""
        documents = [NewDocument(id=d["id"], title=d["title"], text=d["text"]) for d in data.documents]
        return cls(name, documents, [(q.text, q.gold_doc_ids) for q in data.questions if q.gold_doc_ids])


def sets(data_dir: Path) -> list[RecallSet]:
    written = load_written_kb()
    out = [
        RecallSet.of("hotpotqa", load_hotpotqa(data_dir / "hotpotqa_train.json")),
        RecallSet.of("jsquad", load_squad_v2(data_dir / "jsquad_valid_sample.json")),
    ]
    for lang in ("en", "ja"):
        docs = [NewDocument(id=d.id, title=d.title, text=d.text) for d in written.documents if d.lang == lang]
        for route in ("single_hop", "multi_hop"):
            questions = [
                (q.question, frozenset(q.supporting)) for q in written.questions if q.lang == lang and q.route == route
            ]
            out.append(RecallSet(f"written-{lang}-{route}", docs, questions))
    for lang in ("en", "ja"):
        out.append(RecallSet.of(f"near-miss-{lang}", load_near_miss(NEAR_MISS / f"near_miss_{lang}.json")))
    return out


MODES = ("dense", "hybrid", "hybrid + links", "hybrid + links from probe")


async def measure(
    recall_set: RecallSet,
    embeddings: Embeddings,
    ks: list[int],
    *,
    batched: bool = False,
    modes: tuple[str, ...] = MODES,
) -> dict[str, list[float]]:
    """``batched``: every question's vector comes from ``aembed_query`` called for all questions at once, as a
    busy gateway embeds concurrent queries (queued on the model's worker thread, ``USEEmbeddings.aembed_query``).
    ``modes``: which of :data:`MODES` to measure. Per mode, recall@k for each k then all@k for each k."""
    chunking = ChunkingSettings()
    with tempfile.TemporaryDirectory() as tmp:
        store = await LanceVectorStore.open(Path(tmp), embedding_dimensions(embeddings))
        knowledge = KnowledgeBase(embeddings, store, Chunker(chunking.size, chunking.overlap))
        await knowledge.ingest(TENANT, recall_set.documents)
        depth = max(ks)
        questions = [question for question, _ in recall_set.questions]
        vectors: list[list[float] | None] = [None] * len(questions)
        if batched:
            vectors = list(await asyncio.gather(*(embeddings.aembed_query(q) for q in questions)))
        results: dict[str, list[float]] = {}
        for mode in modes:
            knowledge.hybrid = mode != "dense"
            knowledge.links = "links" in mode
            if mode.endswith("from probe"):
                knowledge.matrices = TenantMatrices(store, KnowledgeVersions(MemoryBackend()), 1 << 30)
                assert await knowledge.matrices.warm(TENANT)
            # The gateway's probe, or as deep as the deepest k here needs to be computed from it (the probe serves
            # multi-hop's first search only without the in-memory matrices: gateway.app.probe_depth).
            probing = max(probe_depth(RetrievalSettings(), knowledge), knowledge.ranking_depth(depth))
            recall = {k: 0.0 for k in ks}
            complete = {k: 0 for k in ks}
            for (question, gold), given in zip(recall_set.questions, vectors, strict=True):
                vector = given if given is not None else await knowledge.embed_query(question)
                dense = await knowledge.dense_search(
                    TENANT, question, probing, vector=vector, visibility=Visibility.everything()
                )
                for k in ks:
                    if mode.endswith("from probe"):
                        reused = await knowledge.search_reusing(
                            TENANT,
                            question,
                            k,
                            vector=vector,
                            dense=dense,
                            depth=probing,
                            visibility=Visibility.everything(),
                        )
                        assert reused is not None, "the probe is too shallow for this k"
                        found = reused
                    else:
                        found = await knowledge.search(
                            TENANT, question, k, vector=vector, visibility=Visibility.everything()
                        )
                    docs = {p.doc_id for p in found[:k]}
                    recall[k] += len(gold & docs) / len(gold)
                    complete[k] += gold <= docs
            n = len(recall_set.questions)
            results[mode] = [recall[k] / n for k in ks] + [complete[k] / n for k in ks]
        await store.close()
    return results


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, default=Path("../shared/data/dev"))
    parser.add_argument("--k", type=int, nargs="+", default=[4, 8, 12])
    parser.add_argument("--batched", action="store_true", help="embed each set's questions concurrently, as served")
    parser.add_argument("--encoder", choices=("use", "e5"), default="use", help="the dense encoder (default: USE)")
    args = parser.parse_args()
    embeddings = E5Embeddings() if args.encoder == "e5" else USEEmbeddings()
    ks: list[int] = args.k
    header = " | ".join([*(f"recall@{k}" for k in ks), *(f"all@{k}" for k in ks)])
    print(f"| set | n | retrieval | {header} |")
    print("|---|---|---|" + "---|" * (2 * len(ks)))
    for recall_set in sets(args.data_dir):
        results = await measure(recall_set, embeddings, ks, batched=args.batched)
        for mode, values in results.items():
            cells = " | ".join(f"{v:.3f}" for v in values)
            print(f"| {recall_set.name} | {len(recall_set.questions)} | {mode} | {cells} |", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
