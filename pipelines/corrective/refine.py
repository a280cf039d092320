"""CRAG knowledge refinement, as ordering and trimming: which evidence passages reach the generator, best first.

CRAG decomposes documents into strips and recomposes only the relevant ones. Measured on the local
1.5B model, answers from such fragments were worse than from whole passages (a strip loses the
sentence that names what "it" is, or the condition a number holds under), so strips here only
decide: a passage is kept, whole, when one of its strips is among the best ``max_strips`` above
``strip_threshold`` (or the evaluator confirmed it), and kept passages are ordered by their best strip.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace

import numpy as np

from pipelines.corrective.policy import CorrectivePolicy
from pipelines.shared import Passage, QueryScorer, split_strips

EmbedTexts = Callable[[list[str]], Awaitable[list[list[float]]]]
MIN_KEPT = 2


async def refine_evidence(
    embed: EmbedTexts,
    policy: CorrectivePolicy,
    question: str,
    evidence: list[Passage],
    follow_ups: list[str] | None = None,
    confirmed: set[str] | None = None,
) -> list[Passage]:
    """The passages holding a chosen strip, whole, best first; ``score`` becomes the best strip's.

    A strip scores the better of its score against the question and against each follow-up query:
    the second hop's fact ("Maximum payload: 300 kg") answers the follow-up, and scored against the
    question alone it would lose to the bridge document's strips it was searched to complete.
    """
    pieces = [(i, j, strip) for i, p in enumerate(evidence) for j, strip in enumerate(split_strips(p.text))]
    if not pieces:
        return []
    queries = list(dict.fromkeys([question, *(follow_ups or [])]))
    vectors = np.asarray(await embed([*queries, *[strip for _, _, strip in pieces]]), dtype=np.float32)
    cosines = vectors[len(queries) :] @ vectors[: len(queries)].T  # strips x queries
    scorers = [QueryScorer.of(policy.relevance, query) for query in queries]
    scores = [
        max(scorer.score(evidence[i].title, strip, float(cos)) for scorer, cos in zip(scorers, row, strict=True))
        for (i, _, strip), row in zip(pieces, cosines, strict=True)
    ]
    ranked = sorted(range(len(pieces)), key=lambda n: -scores[n])
    chosen = [n for n in ranked if scores[n] >= policy.strip_threshold][: policy.max_strips]
    if len(chosen) < MIN_KEPT:
        chosen = ranked[: min(MIN_KEPT, len(ranked))]
    # Refinement picks within the documents the evaluator judged relevant, it does not overrule it: each
    # ``confirmed`` chunk keeps at least its best strip (a second hop's fact can score low against every query).
    must_keep = confirmed or set()
    represented = {pieces[n][0] for n in chosen}
    for n in ranked:  # best first: the first strip met of a document is its best
        i = pieces[n][0]
        if i not in represented and evidence[i].chunk_id in must_keep:
            chosen.append(n)
            represented.add(i)
    refined: list[Passage] = []
    for i, passage in enumerate(evidence):
        kept = [scores[n] for n in chosen if pieces[n][0] == i]
        if kept:
            refined.append(replace(passage, score=max(kept)))
    return sorted(refined, key=lambda p: -p.score)


def bounded_context(
    refined: list[Passage], first: list[Passage], rounds: list[list[str]], confirmed: set[str], later: int
) -> list[Passage]:
    """What reaches the generator when the context is bounded: ``first``, plain RAG's context on the first
    retrieval (its top-k, in search order), then up to ``later`` refined passages of each round, ranked as
    that round's search ranked them (``rounds``: each evaluated round's candidates, in search order).

    Of the first round's passages beyond plain RAG's top-k, only ``confirmed`` ones count (judged relevant,
    or the bridge a hop was planned from): the rest are what plain RAG did not need. Measured on the local
    1.5B model, the union of every round's evidence handed the generator distractors it answered from, and
    the fast scorer dropped second-hop passages plain RAG had in its top-k: questions plain RAG answered
    were lost.
    """
    chosen = list(first)
    known = {p.chunk_id for p in chosen}
    rank: dict[str, tuple[int, int]] = {}
    for number, ids in enumerate(rounds):
        for position, chunk_id in enumerate(ids):
            rank.setdefault(chunk_id, (number, position))
    unranked = (len(rounds), 0)  # evidence no evaluated round searched (none in the graph): after the rest
    taken: dict[int, int] = {}
    for passage in sorted(refined, key=lambda p: rank.get(p.chunk_id, unranked)):
        number = rank.get(passage.chunk_id, unranked)[0]
        if passage.chunk_id in known or (number == 0 and passage.chunk_id not in confirmed):
            continue
        if taken.get(number, 0) < later:
            taken[number] = taken.get(number, 0) + 1
            chosen.append(passage)
    return chosen
