"""Reciprocal rank fusion (Cormack et al., 2009): ranked lists merged without calibrating their scores.

Used where two searches answer one need: hybrid retrieval's dense and keyword halves
(:mod:`gateway.knowledge.service`), and a multi-hop round's planned sub-question beside the question expanded by
its bridge (:mod:`pipelines.corrective.nodes`). A chunk both lists rank well wins over one that only one
list ranks first, unless that list's first is kept (``keep_first_of``).
"""

from __future__ import annotations

from collections.abc import Sequence

from pipelines.shared.deps import Passage

RRF_K = 60  # the constant of the original paper; ranks beyond a few dozen barely count


def reciprocal_rank_fusion(rankings: Sequence[Sequence[Passage]], k: int, *, keep_first_of: int = 0) -> list[Passage]:
    """The top ``k`` chunks by the sum of 1 / (RRF_K + rank) over the lists that hold them, in that order.

    ``keep_first_of``: the first chunk of each of the first that many lists is among the top ``k`` whatever the
    sums say (it takes the place of the lowest other), as far as places remain beside the best-fused chunk, which
    always stays: ``k`` = 1 is fusion's pick alone, ``k`` = 2 adds the first list's first. Hybrid retrieval keeps
    its two searches' firsts: they are fused because each finds what the other misses, and a sum of ranks undoes
    that for the chunk only one of them finds. A paraphrased answer page that the dense search ranks first and BM25
    does not hold at all scored below a dozen chunks both lists hold in a small tenant, and fell out of even the top
    12 (the near-miss manuals: ``tests/benchmarks/retrieval_recall.py``).

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
    heads = list(dict.fromkeys(ranking[0].chunk_id for ranking in rankings[:keep_first_of] if ranking))
    chosen = set(heads[: max(k - 1, 0)])  # one place at least is left to the fused order's best
    for chunk_id in order:
        if len(chosen) >= k:
            break
        chosen.add(chunk_id)
    return [first[chunk_id] for chunk_id in order if chunk_id in chosen]
