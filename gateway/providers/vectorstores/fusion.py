"""Hybrid retrieval's two halves written once: BM25 over pre-tokenised text, and reciprocal rank fusion.

Keyword and dense search fail differently: the embedding misses a rare name or number the question
shares with the passage (the second hop of a bridge question is often found by its entity's name
alone), BM25 misses a paraphrase. Reciprocal rank fusion (Cormack et al., 2009) merges the two
ranked lists without calibrating their scores against each other
(:func:`pipelines.shared.fusion.reciprocal_rank_fusion`, shared with the multi-hop search). Terms are the project's one
tokenizer's (:func:`pipelines.shared.text.tokens`), so Japanese is matched by character bigrams in
every store: LanceDB indexes the same tokens, space-joined, with its whitespace tokenizer.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

from pipelines.shared import content_terms, tokens


def index_terms(title: str, text: str) -> str:
    """What a keyword index stores for a chunk: its title's and text's tokens, space-joined."""
    return " ".join(tokens(f"{title}\n{text}"))


def query_terms(query: str) -> list[str]:
    """The query's distinct content terms, in order: no stopwords or particles, which in a small
    tenant's index are rare enough for BM25 to rank a passage on "the" alone; no repeats, which
    would weigh a term twice in an OR query."""
    return list(dict.fromkeys(content_terms(query)))


def bm25_scores(
    query: Sequence[str], documents: Sequence[Sequence[str]], k1: float = 1.2, b: float = 0.75
) -> list[float]:
    """Okapi BM25 of each tokenised document for the query terms (the in-memory store's keyword search)."""
    if not documents:
        return []
    frequencies = [Counter(doc) for doc in documents]
    average = sum(len(doc) for doc in documents) / len(documents) or 1.0
    held_by = Counter(term for counts in frequencies for term in counts)
    n = len(documents)
    scores: list[float] = []
    for doc, counts in zip(documents, frequencies, strict=True):
        score = 0.0
        for term in set(query):
            tf = counts.get(term, 0)
            if tf:
                idf = math.log(1.0 + (n - held_by[term] + 0.5) / (held_by[term] + 0.5))
                score += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * len(doc) / average))
        scores.append(score)
    return scores
