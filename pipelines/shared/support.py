"""An LLM-free check of whether an answer's content comes from its evidence.

Small local models answer from memory even when told not to ("The capital of Peru is Lima [1]"
over passages about something else). Words and numbers an answer adds beyond the question must
appear in the passages; when too many do not, the answer is treated as unsupported. Words are the
project's one tokenizer's (:mod:`pipelines.shared.text`): Latin words, and CJK character bigrams
for Japanese, which has no spaces (of an answer's, those of kanji and katakana: :func:`claim_terms`).
Numbers are compared by value, in digits or in Japanese myriad units.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pipelines.shared.text import EN_STOPWORDS, cjk_share, content_terms, has_cjk, normalise, same_script

_CITATION = re.compile(r"\[\d{1,2}(?:\s*,\s*\d{1,2})*\]")
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
# Words an answer uses to talk about its sources, not about the world: never novel content.
_META_WORDS = """
    also according documents document passage passages context stated states says said mentioned answer
    question based provided information given per during while less one two yes either neither
"""
STOPWORDS = EN_STOPWORDS | frozenset(_META_WORDS.split())
_HIRAGANA = re.compile(r"[\u3040-\u309f]")


@dataclass(frozen=True, slots=True)
class Support:
    ratio: float
    novel_terms: int
    missing: tuple[str, ...]
    missing_numbers: tuple[str, ...]

    def supported(self, min_ratio: float) -> bool:
        return not self.missing_numbers and self.ratio >= min_ratio


def _normalise(text: str) -> str:
    """The shared normalisation (NFKC, casefold, no thousands separators), without citation markers."""
    return normalise(_CITATION.sub(" ", text))


def terms(text: str) -> set[str]:
    """Content terms by the project's tokenizer (:mod:`pipelines.shared.text`): Latin words of two
    characters or more, CJK character bigrams without particles, no stopwords or source-talk."""
    return {t for t in content_terms(_CITATION.sub(" ", text)) if t not in STOPWORDS and (len(t) > 1 or has_cjk(t))}


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


# A number written with Japanese myriad units: "1万2千" (12,000), "約21万", "3億5000万", "1.5万".
_JA_UNITS = {"億": 100_000_000, "万": 10_000, "千": 1_000, "百": 100}
_JA_NUMBER = re.compile(r"\d+(?:\.\d+)?[億万千百](?:\d+(?:\.\d+)?[億万千百]?)*")
_JA_PART = re.compile(r"(\d+(?:\.\d+)?)([億万千百]?)")


def _ja_value(match: re.Match[str]) -> str:
    """The number a myriad-unit expression stands for, in digits: each part times its unit, added up."""
    total = sum((float(value) * _JA_UNITS.get(unit, 1) for value, unit in _JA_PART.findall(match.group())), 0.0)
    return str(int(total)) if total.is_integer() else str(total)


def _numbers(text: str) -> set[str]:
    """Numbers without leading zeros, by value: month names count as their number ("March" supports "3月"), and
    Japanese myriad units as the number they make ("1万2千人" supports "12,000 people", and the reverse)."""
    norm = _JA_NUMBER.sub(_ja_value, _normalise(text))
    found = {n.lstrip("0") or "0" for n in _NUMBER.findall(norm)}
    return found | {_MONTHS[m] for m in _MONTH_WORD.findall(norm)}


def mostly_cjk(text: str) -> bool:
    return cjk_share(text) * 3 > 1


def claim_terms(text: str) -> set[str]:
    """The terms an answer's claim is checked by: :func:`terms` without the Japanese ones that hold hiragana.

    Japanese writes what a sentence is about in kanji and katakana, and particles, inflections and yes/no in
    hiragana, so a bigram with hiragana in it is the seam between a word and its ending ("も使", "異な", "答し")
    or a reply word ("はい"). Counted as content, any paraphrase of the passage "invented" them: on the written
    Japanese questions most of plain RAG's abstentions were such seams. Kanji and katakana bigrams still catch an
    invented name, place or figure.
    """
    return {t for t in terms(text) if not _HIRAGANA.search(t)}


def _found(term: str, evidence_terms: set[str], evidence_text: str, evidence_numbers: set[str]) -> bool:
    """A term is in the evidence as a term, as a Japanese substring of its text, or as a number of the same value
    ("12000" where the passage says 1万2千)."""
    if term in evidence_terms:
        return True
    if has_cjk(term):
        return term in evidence_text
    return term.isdigit() and (term.lstrip("0") or "0") in evidence_numbers


def lexical_support(answer: str, question: str, evidence: list[str]) -> Support:
    """Numbers are compared whatever the languages; words only when answer and evidence share a script, read
    from their letters (a Japanese answer over English passages is a translation, not an invention; "1,800円" is
    Japanese, and a bare number is in every script). A Japanese term is found anywhere in the passages' text, as
    :func:`pipelines.shared.text.content_words` finds words: "約" between digits is a term of its own in "約1万"
    and part of the bigram "は約" in "人口は約1万"."""
    evidence_text = " ".join(evidence)
    evidence_terms = terms(evidence_text)
    evidence_norm = _normalise(evidence_text)
    compared = same_script(answer, evidence_text)  # citation markers have no letters
    novel = claim_terms(answer) - terms(question) if compared else set()
    evidence_numbers = _numbers(evidence_text)
    missing = tuple(sorted(t for t in novel if not _found(t, evidence_terms, evidence_norm, evidence_numbers)))
    numbers = _numbers(answer) - _numbers(question) - evidence_numbers
    ratio = 1.0 if not novel else 1.0 - len(missing) / len(novel)
    return Support(ratio=ratio, novel_terms=len(novel), missing=missing, missing_numbers=tuple(sorted(numbers)))
