"""Hybrid retrieval keeps each search's first chunk: a paraphrased answer page that only the dense search finds is not
outvoted by the chunks both searches hold (the sum of reciprocal ranks favours agreement)."""

from __future__ import annotations

from pathlib import Path

from gateway.knowledge.chunking import Chunker
from gateway.knowledge.service import HYBRID_DEPTH, KnowledgeBase, NewDocument
from gateway.providers.embeddings import USEEmbeddings
from gateway.providers.vectorstores.fusion import query_terms
from gateway.settings import ChunkingSettings
from pipelines.shared.deps import Passage
from pipelines.shared.fusion import reciprocal_rank_fusion
from pipelines.shared.visibility import Visibility
from routes.offline.eval.datasets import load_near_miss
from tests.fakes.memory_store import InMemoryVectorStore

MANUALS = Path(__file__).resolve().parents[2] / "routes" / "data" / "near_miss_en.json"


def chunks(*ids: str) -> list[Passage]:
    return [Passage(i, i, i, i, 0.0) for i in ids]


def test_each_kept_lists_first_chunk_is_in_the_top_k_and_the_rest_follow_the_sums() -> None:
    shared = [f"both-{i}" for i in range(6)]
    dense = chunks("only-dense", *shared)
    keyword = chunks("only-keyword", *reversed(shared))
    plain = [p.chunk_id for p in reciprocal_rank_fusion([dense, keyword], 4)]
    assert "only-dense" not in plain
    assert "only-keyword" not in plain
    kept = [p.chunk_id for p in reciprocal_rank_fusion([dense, keyword], 4, keep_first_of=2)]
    assert set(kept) == {"only-dense", "only-keyword", *plain[:2]}
    assert kept == [c for c in [*plain, "only-dense", "only-keyword"] if c in kept]  # still in fused order
    # Fewer places: the best-fused chunk always stays, the firsts take what is left, the first lists' first.
    assert reciprocal_rank_fusion([dense, keyword], 1, keep_first_of=2) == reciprocal_rank_fusion([dense, keyword], 1)
    two = [p.chunk_id for p in reciprocal_rank_fusion([dense, keyword], 2, keep_first_of=2)]
    assert two == [plain[0], "only-dense"]
    linked = chunks("only-linked", *shared)
    three = [p.chunk_id for p in reciprocal_rank_fusion([dense, keyword, linked], 4, keep_first_of=2)]
    assert "only-linked" not in three
    assert {"only-dense", "only-keyword"} <= set(three)
    assert reciprocal_rank_fusion([dense, keyword], 0, keep_first_of=2) == []
    only_keyword = reciprocal_rank_fusion([[], keyword], 2, keep_first_of=2)  # a search that found nothing
    assert [p.chunk_id for p in only_keyword] == ["only-keyword", "both-5"]


async def test_a_paraphrased_answer_page_the_dense_search_ranks_first_survives_the_fusion() -> None:
    """The written near-miss manual, on the real embeddings: the question shares no content word with its answer
    page ("bedtime block" / "video call" against the page's own words), and BM25 finds a dozen chunks of the
    neighbouring pages instead."""
    manual = load_near_miss(MANUALS)
    case = next(q for q in manual.questions if q.text.startswith("My kid's bedtime block"))
    (answer_doc,) = case.gold_doc_ids
    chunking = ChunkingSettings()
    knowledge = KnowledgeBase(USEEmbeddings(), InMemoryVectorStore(), Chunker(chunking.size, chunking.overlap))
    documents = [NewDocument(id=d["id"], title=d["title"], text=d["text"]) for d in manual.documents]
    await knowledge.ingest("manuals", documents)
    question, k = case.text, 4
    vector = await knowledge.embed_query(question)
    dense = await knowledge.dense_search(
        "manuals", question, k * HYBRID_DEPTH, vector=vector, visibility=Visibility.everything()
    )
    keyword = await knowledge.store.keyword_search(
        "manuals", query_terms(question), vector, k * HYBRID_DEPTH, visibility=Visibility.everything()
    )
    assert dense[0].doc_id == answer_doc
    assert answer_doc not in {p.doc_id for p in keyword}
    assert answer_doc not in {p.doc_id for p in reciprocal_rank_fusion([dense, keyword], k)}
    found = await knowledge.search("manuals", question, k, vector=vector, visibility=Visibility.everything())
    assert answer_doc in {p.doc_id for p in found}
