"""An LLM-free check of whether an answer's content comes from its evidence.

Small local models answer from memory even when told not to ("The capital of Peru is Lima [1]"
over passages about something else). Words and numbers an answer adds beyond the question must
appear in the passages; when too many do not, the answer is treated as unsupported. Japanese has
no spaces, so it is compared by character bigrams.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

_WORD = re.compile(r"[a-z0-9][a-z0-9'\-.]*[a-z0-9]|[a-z0-9]")
_CJK_RUN = re.compile(r"[\u3040-\u30ff\u4e00-\u9fff]+")
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_CITATION = re.compile(r"\[\d{1,2}(?:\s*,\s*\d{1,2})*\]")
STOPWORDS = frozenset(
    [
        "a",
        "an",
        "the",
        "of",
        "in",
        "on",
        "at",
        "to",
        "for",
        "from",
        "by",
        "with",
        "and",
        "or",
        "but",
        "not",
        "no",
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "being",
        "has",
        "have",
        "had",
        "do",
        "does",
        "did",
        "it",
        "its",
        "this",
        "that",
        "these",
        "those",
        "there",
        "their",
        "they",
        "them",
        "he",
        "she",
        "his",
        "her",
        "him",
        "we",
        "our",
        "you",
        "your",
        "i",
        "me",
        "my",
        "as",
        "than",
        "then",
        "so",
        "such",
        "which",
        "who",
        "whom",
        "whose",
        "what",
        "when",
        "where",
        "why",
        "how",
        "all",
        "any",
        "each",
        "both",
        "either",
        "neither",
        "also",
        "according",
        "documents",
        "document",
        "passage",
        "passages",
        "context",
        "stated",
        "states",
        "says",
        "said",
        "mentioned",
        "answer",
        "question",
        "based",
        "provided",
        "information",
        "given",
        "per",
        "about",
        "into",
        "over",
        "under",
        "after",
        "before",
        "during",
        "while",
        "more",
        "most",
        "less",
        "can",
        "could",
        "may",
        "might",
        "will",
        "would",
        "should",
        "shall",
        "must",
        "one",
        "two",
        "yes",
    ]
)
_CJK_STOP = frozenset(
    ["です", "ます", "した", "して", "ある", "いる", "こと", "もの", "ため", "よう", "から", "まで", "など", "について"]
)


@dataclass(frozen=True, slots=True)
class Support:
    ratio: float
    novel_terms: int
    missing: tuple[str, ...]
    missing_numbers: tuple[str, ...]

    def supported(self, min_ratio: float) -> bool:
        return not self.missing_numbers and self.ratio >= min_ratio


_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")


def _normalise(text: str) -> str:
    """NFKC, lower case, no citations, and "1,200,000" written as "1200000" for words and numbers alike."""
    return _THOUSANDS.sub("", unicodedata.normalize("NFKC", _CITATION.sub(" ", text)).lower())


def terms(text: str) -> set[str]:
    norm = _normalise(text)
    words = {w for w in _WORD.findall(norm) if w not in STOPWORDS and len(w) > 1}
    for run in _CJK_RUN.findall(norm):
        words |= {run[i : i + 2] for i in range(len(run) - 1)} - _CJK_STOP
        if len(run) == 1:
            words.add(run)
    return words


_MONTHS = {
    name: str(number)
    for number, names in enumerate(
        [
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sep", "sept"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ],
        start=1,
    )
    for name in names
}
_MONTH_WORD = re.compile(r"\b(" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\b")


def _numbers(text: str) -> set[str]:
    """Numbers without leading zeros; month names count as their number ("March" supports "3月")."""
    norm = _normalise(text)
    found = {n.lstrip("0") or "0" for n in _NUMBER.findall(norm)}
    return found | {_MONTHS[m] for m in _MONTH_WORD.findall(norm)}


def mostly_cjk(text: str) -> bool:
    cjk = sum(len(run) for run in _CJK_RUN.findall(text))
    return cjk * 3 > len(text)


def lexical_support(answer: str, question: str, evidence: list[str]) -> Support:
    """Numbers are compared whatever the languages; words only when answer and evidence share a script
    (a Japanese answer over English passages is a translation, not an invention)."""
    evidence_text = " ".join(evidence)
    evidence_terms = terms(evidence_text)
    same_script = mostly_cjk(answer) == mostly_cjk(evidence_text)
    novel = terms(answer) - terms(question) if same_script else set()
    missing = tuple(sorted(t for t in novel if t not in evidence_terms))
    numbers = _numbers(answer) - _numbers(question) - _numbers(evidence_text)
    ratio = 1.0 if not novel else 1.0 - len(missing) / len(novel)
    return Support(ratio=ratio, novel_terms=len(novel), missing=missing, missing_numbers=tuple(sorted(numbers)))
