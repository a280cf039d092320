"""An LLM-free check of whether an answer's content comes from its evidence.

Small local models answer from memory even when told not to ("The capital of Peru is Lima [1]"
over passages about something else). Words and numbers an answer adds beyond the question must
appear in the passages; when too many do not, the answer is treated as unsupported. Words are the
project's one tokenizer's (:mod:`pipelines.shared.text`): Latin words, and CJK character bigrams
for Japanese, which has no spaces.
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


def lexical_support(answer: str, question: str, evidence: list[str]) -> Support:
    """Numbers are compared whatever the languages; words only when answer and evidence share a script, read
    from their letters (a Japanese answer over English passages is a translation, not an invention; "1,800円" is
    Japanese, and a bare number is in every script)."""
    evidence_text = " ".join(evidence)
    evidence_terms = terms(evidence_text)
    novel = terms(answer) - terms(question) if same_script(_CITATION.sub(" ", answer), evidence_text) else set()
    missing = tuple(sorted(t for t in novel if t not in evidence_terms))
    numbers = _numbers(answer) - _numbers(question) - _numbers(evidence_text)
    ratio = 1.0 if not novel else 1.0 - len(missing) / len(novel)
    return Support(ratio=ratio, novel_terms=len(novel), missing=missing, missing_numbers=tuple(sorted(numbers)))
