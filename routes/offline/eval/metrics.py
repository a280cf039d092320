"""SQuAD-style answer metrics and the aggregates the report prints.

Japanese answers are scored the way JSQuAD's own evaluation does: F1 over characters, since a
space-less sentence is one "word" and word F1 would be 0 or 1. Text is NFKC-normalised first
("８日目" and "8日目" are the same answer) and Japanese punctuation is removed with ASCII's.
"""

from __future__ import annotations

import re
import string
import unicodedata
from collections import Counter
from collections.abc import Sequence

import numpy as np

from pipelines.shared import has_cjk

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_CITATIONS = re.compile(r"\[\d{1,2}(?:\s*,\s*\d{1,2})*\]")
# ASCII punctuation and what NFKC leaves of Japanese punctuation and brackets.
_PUNCTUATION = frozenset(string.punctuation) | frozenset("。、・「」『』【】〈〉《》〔〕（）〜～…‥“”‘’")


def normalize_answer(text: str) -> str:
    """The official SQuAD normalisation (lower case, no punctuation, no articles, single spaces) after NFKC,
    with Japanese punctuation counted as punctuation."""
    text = unicodedata.normalize("NFKC", _CITATIONS.sub(" ", text)).lower()
    text = "".join(ch for ch in text if ch not in _PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def exact_match(prediction: str, answers: Sequence[str]) -> float:
    return max((float(normalize_answer(prediction) == normalize_answer(a)) for a in answers), default=0.0)


def f1_score(prediction: str, answers: Sequence[str]) -> float:
    def one(gold: str) -> float:
        predicted, truth = _units(normalize_answer(prediction), normalize_answer(gold))
        common = Counter(predicted) & Counter(truth)
        same = sum(common.values())
        if same == 0:
            return 0.0
        precision, recall = same / len(predicted), same / len(truth)
        return 2 * precision * recall / (precision + recall)

    return max((one(a) for a in answers), default=0.0)


def _units(prediction: str, gold: str) -> tuple[list[str], list[str]]:
    """What F1 counts: words, or characters (spaces dropped) when the gold answer is Japanese."""
    if has_cjk(gold):
        return [ch for ch in prediction if not ch.isspace()], [ch for ch in gold if not ch.isspace()]
    return prediction.split(), gold.split()


def answer_in_prediction(prediction: str, answers: Sequence[str]) -> float:
    """Whether a normalised gold answer occurs inside the (sentence-long) prediction."""
    norm = normalize_answer(prediction)
    return max((float(bool(normalize_answer(a)) and normalize_answer(a) in norm) for a in answers), default=0.0)


def passage_recall(evidence_ids: Sequence[str], gold_ids: frozenset[str]) -> float | None:
    if not gold_ids:
        return None
    return len(gold_ids & set(evidence_ids)) / len(gold_ids)


def percentile(values: Sequence[float], q: float) -> float:
    return round(float(np.percentile(values, q)), 1) if values else float("nan")


def median(values: Sequence[float]) -> float:
    """The cost target is a median (a few questions that loop to the budget must not hide the typical one)."""
    return round(float(np.median(values)), 2) if values else float("nan")


def mean(values: Sequence[float | None]) -> float:
    kept = [v for v in values if v is not None]
    return round(float(np.mean(kept)), 4) if kept else float("nan")
