"""CRAG knowledge refinement: strips are scored, filtered and recomposed in their original order."""

from __future__ import annotations

from gateway.providers.embeddings import USEEmbeddings
from pipelines.corrective.policy import CorrectivePolicy
from pipelines.corrective.refine import MIN_KEPT, refine_evidence
from pipelines.shared.deps import Passage
from pipelines.shared.strips import split_strips

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


BIRTH = Passage(
    chunk_id="nolan-bio#0",
    doc_id="nolan-bio",
    title="Christopher Nolan",
    text="Christopher Nolan was born on 30 July 1970 in Westminster, London. His father was an advertising executive.",
    score=0.3,
)
BRIDGE_QUESTION = "Where was the director of the film Inception born?"


async def test_a_confirmed_second_hop_keeps_its_best_strip_and_follow_ups_score_strips(
    embeddings: USEEmbeddings,
) -> None:
    async def embed(texts: list[str]) -> list[list[float]]:
        return embeddings.embed_documents(texts)

    strict = CorrectivePolicy(strip_threshold=0.9, max_strips=1)
    unconfirmed = await refine_evidence(embed, strict, BRIDGE_QUESTION, [BIO, BIRTH])
    # Nothing reaches the threshold: only the MIN_KEPT best strips survive, whichever documents they come from.
    assert sum(len(split_strips(p.text)) for p in unconfirmed) == MIN_KEPT
    # Judged relevant by the evaluator, the birth record keeps its best strip whatever the threshold says.
    confirmed = await refine_evidence(embed, strict, BRIDGE_QUESTION, [BIO, BIRTH], confirmed={"nolan-bio#0"})
    [birth] = [p for p in confirmed if p.doc_id == "nolan-bio"]
    assert "born on 30 July 1970 in Westminster" in birth.text
    assert "advertising executive" not in birth.text

    # A strip's score is its best against the question and the follow-up queries.
    follow_up = "Where was Christopher Nolan born?"
    alone = await refine_evidence(embed, CorrectivePolicy(strip_threshold=0.0), BRIDGE_QUESTION, [BIRTH])
    helped = await refine_evidence(
        embed, CorrectivePolicy(strip_threshold=0.0), BRIDGE_QUESTION, [BIRTH], follow_ups=[follow_up]
    )
    assert helped[0].score > alone[0].score
