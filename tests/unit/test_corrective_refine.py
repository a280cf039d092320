"""CRAG knowledge refinement: strips are scored, filtered and recomposed in their original order."""

from __future__ import annotations

from gateway.providers.embeddings import USEEmbeddings
from pipelines.corrective.policy import CorrectivePolicy
from pipelines.corrective.refine import refine_evidence
from pipelines.shared.deps import Passage

BIO = Passage(
    chunk_id="nolan#0",
    doc_id="nolan",
    title="Inception",
    text=(
        "Inception is a 2010 science fiction film. It was directed by Christopher Nolan, a British filmmaker. "
        "He grew up in London and Chicago before studying literature. The film's soundtrack was composed by "
        "Hans Zimmer and widely praised. Box office receipts exceeded 800 million dollars worldwide."
    ),
    score=0.5,
)
QUESTION = "Who directed the film Inception?"


async def test_only_strips_above_the_threshold_reach_the_generator(embeddings: USEEmbeddings) -> None:
    async def embed(texts: list[str]) -> list[list[float]]:
        return embeddings.embed_documents(texts)

    [refined] = await refine_evidence(embed, CorrectivePolicy(strip_threshold=0.5, max_strips=1), QUESTION, [BIO])
    assert "directed by Christopher Nolan" in refined.text
    assert "Hans Zimmer" not in refined.text
    assert "800 million" not in refined.text
    assert len(refined.text) < len(BIO.text)


async def test_strips_are_recomposed_in_original_order_and_ids_kept(embeddings: USEEmbeddings) -> None:
    async def embed(texts: list[str]) -> list[list[float]]:
        return embeddings.embed_documents(texts)

    [refined] = await refine_evidence(embed, CorrectivePolicy(strip_threshold=0.0, max_strips=10), QUESTION, [BIO])
    assert (refined.chunk_id, refined.doc_id) == ("nolan#0", "nolan")
    positions = [BIO.text.index(sentence) for sentence in refined.text.split(". ") if sentence]
    assert positions == sorted(positions)


async def test_nothing_to_refine_gives_nothing(embeddings: USEEmbeddings) -> None:
    async def embed(texts: list[str]) -> list[list[float]]:
        return embeddings.embed_documents(texts)

    assert await refine_evidence(embed, CorrectivePolicy(), QUESTION, []) == []
