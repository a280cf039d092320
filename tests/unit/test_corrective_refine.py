"""CRAG knowledge refinement as ordering and trimming: strips are scored and choose which passages reach the
generator, whole, best first (fragments made the local model answer worse)."""

from __future__ import annotations

import pytest

from gateway.providers.embeddings import USEEmbeddings
from pipelines.corrective.refine import MIN_KEPT, EmbedTexts, bounded_context, refine_evidence
from pipelines.shared.deps import Passage
from tests.calibration_support import corrective_policy

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


@pytest.fixture
def embed(embeddings: USEEmbeddings) -> EmbedTexts:
    """What refinement embeds strips and queries with."""

    async def embed_texts(texts: list[str]) -> list[list[float]]:
        return embeddings.embed_documents(texts)

    return embed_texts


SOUNDTRACK = Passage(
    chunk_id="zimmer#0",
    doc_id="zimmer",
    title="Hans Zimmer",
    text="Hans Zimmer is a German film composer. He has scored more than 150 films and won two Academy Awards.",
    score=0.4,
)


async def test_passages_with_a_strip_above_the_threshold_reach_the_generator_whole(embed: EmbedTexts) -> None:
    policy = corrective_policy(strip_threshold=0.5, max_strips=1)
    [refined] = await refine_evidence(embed, policy, QUESTION, [SOUNDTRACK, BIO])
    assert (refined.chunk_id, refined.doc_id, refined.text) == ("nolan#0", "nolan", BIO.text)
    assert refined.score > 0.5  # the best strip's score, not the retrieval's


async def test_kept_passages_are_ordered_by_their_best_strip(embed: EmbedTexts) -> None:
    refined = await refine_evidence(embed, corrective_policy(strip_threshold=0.0), QUESTION, [SOUNDTRACK, BIO])
    assert [p.doc_id for p in refined] == ["nolan", "zimmer"]
    assert [p.text for p in refined] == [BIO.text, SOUNDTRACK.text]
    assert refined[0].score > refined[1].score


async def test_nothing_to_refine_gives_nothing(embed: EmbedTexts) -> None:
    assert await refine_evidence(embed, corrective_policy(), QUESTION, []) == []


BIRTH = Passage(
    chunk_id="nolan-bio#0",
    doc_id="nolan-bio",
    title="Christopher Nolan",
    text="Christopher Nolan was born on 30 July 1970 in Westminster, London. His father was an advertising executive.",
    score=0.3,
)
BRIDGE_QUESTION = "Where was the director of the film Inception born?"


async def test_a_confirmed_second_hop_keeps_its_best_strip_and_follow_ups_score_strips(
    embed: EmbedTexts,
) -> None:
    strict = corrective_policy(strip_threshold=0.9, max_strips=1)
    unconfirmed = await refine_evidence(embed, strict, BRIDGE_QUESTION, [BIO, BIRTH])
    # Nothing reaches the threshold: only the MIN_KEPT best strips survive, here both from the film's passage.
    assert MIN_KEPT == 2
    assert [p.doc_id for p in unconfirmed] == ["nolan"]
    # Judged relevant by the evaluator, the birth record is kept (whole) whatever the threshold says.
    confirmed = await refine_evidence(embed, strict, BRIDGE_QUESTION, [BIO, BIRTH], confirmed={"nolan-bio#0"})
    [birth] = [p for p in confirmed if p.doc_id == "nolan-bio"]
    assert birth.text == BIRTH.text

    # A strip's score is its best against the question and the follow-up queries.
    follow_up = "Where was Christopher Nolan born?"
    alone = await refine_evidence(embed, corrective_policy(strip_threshold=0.0), BRIDGE_QUESTION, [BIRTH])
    helped = await refine_evidence(
        embed, corrective_policy(strip_threshold=0.0), BRIDGE_QUESTION, [BIRTH], follow_ups=[follow_up]
    )
    assert helped[0].score > alone[0].score


def _passage(chunk_id: str, score: float = 0.5) -> Passage:
    return Passage(chunk_id=chunk_id, doc_id=chunk_id.split("#")[0], title=chunk_id, text=chunk_id, score=score)


def _ids(passages: list[Passage]) -> list[str]:
    return [p.chunk_id for p in passages]


def test_bounded_context_is_plain_rags_then_each_hops_best_new_ones_in_search_order() -> None:
    plain = [_passage("a#0"), _passage("b#0")]
    # Refinement's order (best strip first) is not the bound's: a hop's passages rank as its search ranked them.
    refined = [_passage(c, s) for c, s in [("h1#0", 0.9), ("a#0", 0.8), ("h2#0", 0.6), ("h3#0", 0.5)]]
    rounds = [["a#0", "b#0", "c#0"], ["h2#0", "h1#0", "h3#0"]]
    chosen = bounded_context(refined, plain, rounds, confirmed=set(), later=2)
    assert _ids(chosen) == ["a#0", "b#0", "h2#0", "h1#0"]


def test_bounded_context_keeps_first_round_passages_past_plain_rags_only_when_confirmed() -> None:
    plain = [_passage("a#0")]
    refined = [_passage("c#0"), _passage("d#0"), _passage("e#0")]
    rounds = [["a#0", "b#0", "c#0", "d#0", "e#0"]]
    chosen = bounded_context(refined, plain, rounds, confirmed={"e#0", "d#0"}, later=1)
    assert _ids(chosen) == ["a#0", "d#0"]


def test_bounded_context_without_plain_rags_passages_keeps_the_hops() -> None:
    # Every first-round passage under the grounding floor: plain RAG would abstain, the hop still answers.
    chosen = bounded_context([_passage("h#0")], [], [["a#0"], ["h#0"]], confirmed=set(), later=2)
    assert _ids(chosen) == ["h#0"]
