"""Reciprocal rank fusion (Cormack et al., 2009): ranked lists merged without calibrating their scores.

Used where two searches answer one need: hybrid retrieval's dense and keyword halves
(:mod:`gateway.knowledge.service`), and a multi-hop round's planned sub-question beside the question expanded by
its bridge (:mod:`pipelines.corrective.nodes`). A chunk both lists rank well wins over one that only one
list ranks first.
"""

from __future__ import annotations

from collections.abc import Sequence

from pipelines.shared.deps import Passage

RRF_K = 60  # the constant of the original paper; ranks beyond a few dozen barely count


def reciprocal_rank_fusion(rankings: Sequence[Sequence[Passage]], k: int) -> list[Passage]:
    """The top ``k`` chunks by the sum of 1 / (RRF_K + rank) over the lists that hold them.

    A chunk keeps the passage of the first list that has it: its ``score`` stays the cosine
    similarity every store reports, which the relevance scorer reads as a feature.
    """
    fused: dict[str, float] = {}
    first: dict[str, Passage] = {}
    for ranking in rankings:
        for rank, passage in enumerate(ranking, start=1):
            fused[passage.chunk_id] = fused.get(passage.chunk_id, 0.0) + 1.0 / (RRF_K + rank)
            first.setdefault(passage.chunk_id, passage)
    order = sorted(fused, key=lambda chunk_id: -fused[chunk_id])
    return [first[chunk_id] for chunk_id in order[:k]]
