"""The round judge asked the sentence gate's question: does some passage support this sentence?

The judge (:mod:`pipelines.shared.judge`) scores how well each passage of a round answers a question; read with an
answer's sentence in the question's place, its best passage's probability is a support score that, unlike the
lexical test, weighs the sentence's words by how few passages hold them. Two readings, measured against the lexical
test by ``python -m routes.offline.eval.sentence_gate --relevance-judge``:

- :class:`GateReading`, the gate's own (:class:`~pipelines.shared.sentence_gate.RoundCheck`): every passage at the
  same cosine, nothing embedded;
- :class:`JudgedSupport`: the passages' real cosines to the sentence (an embedding per sentence and per passage).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np

from pipelines.shared import JudgeModel, Passage, RoundCheck, judge_round

EmbedArray = Callable[[list[str]], np.ndarray]


class SupportReading(Protocol):
    def score(self, sentence: str, titles: Sequence[str], texts: Sequence[str]) -> float: ...


class GateReading:
    """The sentence gate's second test as it runs: the judge over the passages, each at the same cosine."""

    def __init__(self, model: JudgeModel) -> None:
        self._model = model

    def score(self, sentence: str, titles: Sequence[str], texts: Sequence[str]) -> float:
        return RoundCheck.over(0.0, titles, texts, self._model).score(sentence)


class JudgedSupport:
    """Support scores of sentences against one answer's passages (embedded once per set of passages)."""

    def __init__(self, embed: EmbedArray, model: JudgeModel) -> None:
        self._embed = embed
        self._model = model
        self._passages: dict[tuple[str, ...], np.ndarray] = {}  # by the passages' titles and texts

    def score(self, sentence: str, titles: Sequence[str], texts: Sequence[str]) -> float:
        """The judge's probability for the passage that best supports ``sentence``."""
        key = (*titles, *texts)
        if key not in self._passages:
            self._passages[key] = _unit(self._embed([f"{t}\n{x}" for t, x in zip(titles, texts, strict=True)]))
        cosines = self._passages[key] @ _unit(self._embed([sentence]))[0]
        round_ = [
            Passage(str(i), str(i), title, text, float(cosine))
            for i, (title, text, cosine) in enumerate(zip(titles, texts, cosines, strict=True))
        ]
        return max(judge_round(self._model, sentence, round_))


def _unit(vectors: np.ndarray) -> np.ndarray:
    matrix = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix / np.where(norms == 0, 1.0, norms)
