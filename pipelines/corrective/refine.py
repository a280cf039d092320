"""CRAG knowledge refinement: keep the strips of the evidence that bear on the question."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace

import numpy as np

from pipelines.corrective.policy import CorrectivePolicy
from pipelines.shared.deps import Passage
from pipelines.shared.relevance import QueryScorer
from pipelines.shared.strips import split_strips

EmbedTexts = Callable[[list[str]], Awaitable[list[list[float]]]]
MIN_KEPT = 2


async def refine_evidence(
    embed: EmbedTexts, policy: CorrectivePolicy, question: str, evidence: list[Passage]
) -> list[Passage]:
    """Refined passages: each keeps only its chosen strips, recomposed in their original order."""
    pieces = [(i, j, strip) for i, p in enumerate(evidence) for j, strip in enumerate(split_strips(p.text))]
    if not pieces:
        return []
    vectors = np.asarray(await embed([question, *[strip for _, _, strip in pieces]]), dtype=np.float32)
    cosines = vectors[1:] @ vectors[0]
    scorer = QueryScorer.of(policy.relevance, question)
    scores = [
        scorer.score(evidence[i].title, strip, float(cos)) for (i, _, strip), cos in zip(pieces, cosines, strict=True)
    ]
    ranked = sorted(range(len(pieces)), key=lambda n: -scores[n])
    chosen = [n for n in ranked if scores[n] >= policy.strip_threshold][: policy.max_strips]
    if len(chosen) < MIN_KEPT:
        chosen = ranked[: min(MIN_KEPT, len(ranked))]
    refined: list[Passage] = []
    for i, passage in enumerate(evidence):
        kept = sorted((pieces[n][1], pieces[n][2], scores[n]) for n in chosen if pieces[n][0] == i)
        if kept:
            text = " ".join(strip for _, strip, _ in kept)
            refined.append(replace(passage, text=text, score=max(score for _, _, score in kept)))
    return sorted(refined, key=lambda p: -p.score)
