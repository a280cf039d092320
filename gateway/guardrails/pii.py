"""Personal data in free text, English and Japanese, found by validated patterns (and a name model if set).

Patterns rather than Presidio's analyzer: measured on this machine (see the README's guardrails section),
importing ``presidio_analyzer`` pulls spaCy in (2 s at start, ~300 MB installed), its e-mail check asks
the network for the public-suffix list on first use, and its ``\\b``-anchored patterns miss an address or
number written straight after Japanese text (``メールはtaro@example.jp``). What Presidio validates, these
validate too: a card number must pass Luhn, a My Number its check digit, an IP address :mod:`ipaddress`.

Detection runs on a copy of the text with full-width ASCII folded to ASCII character for character, so
``０９０－１２３４－５６７８`` is found and the offsets still point into the original text.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

Category = Literal["EMAIL", "PHONE", "CREDIT_CARD", "MY_NUMBER", "IP_ADDRESS", "PERSON"]
CATEGORIES: tuple[Category, ...] = ("EMAIL", "PHONE", "CREDIT_CARD", "MY_NUMBER", "IP_ADDRESS", "PERSON")


@dataclass(frozen=True, slots=True)
class Finding:
    category: Category
    start: int
    end: int


class NameFinder(Protocol):
    """Spans of person names in a text (a NER model): the one check patterns cannot do."""

    def names(self, text: str) -> list[tuple[int, int]]: ...


# Full-width ASCII (U+FF01..U+FF5E) and the dashes Japanese text writes numbers with, one character each.
_FOLD = {code: code - 0xFEE0 for code in range(0xFF01, 0xFF5F)}
_FOLD.update({ord(c): ord("-") for c in "－‐‑–—−"})
_FOLD[0x3000] = ord(" ")

_EMAIL = re.compile(
    r"(?<![A-Za-z0-9._%+-])[A-Za-z0-9._%+-]{1,64}@[A-Za-z0-9-]{1,63}(?:\.[A-Za-z0-9-]{1,63})*\.[A-Za-z]{2,24}"
)
# Japanese numbers: 0 then 9 or 10 more digits, hyphens/spaces/parentheses between groups; +81 drops the 0.
_JP_PHONE = re.compile(r"(?<![\d+-])(?:\(?0\d{1,4}\)?[ -]?\d{1,4}[ -]?\d{3,4}|0\d{9,10})(?![\d-])")
_INTL_PHONE = re.compile(r"(?<![\w+])\+\d{1,3}[ .-]?(?:\(\d{1,4}\)[ .-]?)?\d{1,4}(?:[ .-]?\d{2,4}){1,4}(?![\d-])")
_NANP_PHONE = re.compile(r"(?<![\d-])(?:\(\d{3}\) ?|\d{3}[ .-])\d{3}[ .-]\d{4}(?![\d-])")
_DIGIT_RUN = re.compile(r"(?<![\d.-])\d(?:[ -]?\d){11,18}(?![\d]|[.-]\d)")
_IPV4 = re.compile(r"(?<![\d.])(?:\d{1,3}\.){3}\d{1,3}(?![\d]|\.\d)")
_IPV6 = re.compile(r"(?<![0-9A-Fa-f:])(?=[0-9A-Fa-f:]*:[0-9A-Fa-f:]*:)[0-9A-Fa-f:]{2,39}(?:%\w+)?(?![0-9A-Fa-f:])")
_NON_DIGITS = re.compile(r"\D")


# The katakana prolonged sound mark is a dash only between digits (090ー1234ー5678), never in マイナンバー.
_CHOON_BETWEEN_DIGITS = re.compile(r"(?<=\d)ー(?=\d)")


def fold(text: str) -> str:
    return _CHOON_BETWEEN_DIGITS.sub("-", text.translate(_FOLD))


def luhn_valid(digits: str) -> bool:
    total = 0
    for index, char in enumerate(reversed(digits)):
        value = int(char)
        if index % 2 == 1:
            value = value * 2 - 9 if value > 4 else value * 2
        total += value
    return total % 10 == 0


def my_number_valid(digits: str) -> bool:
    """個人番号: 11 digits and a check digit (the Cabinet Office's formula: weights 2..7, 2..6 from the right)."""
    if len(digits) != 12 or not digits.isdigit():
        return False
    body = [int(c) for c in digits[:11]]
    total = sum(p * (n + 1 if n <= 6 else n - 5) for n, p in enumerate(reversed(body), start=1))
    remainder = total % 11
    return int(digits[11]) == (0 if remainder <= 1 else 11 - remainder)


def _phone_digits_ok(candidate: str) -> bool:
    digits = _NON_DIGITS.sub("", candidate)
    if candidate.startswith("+"):
        return 8 <= len(digits) <= 15
    if digits.startswith("0"):
        # Japan: 11 digits for 070/080/090 mobiles and 050 IP phones, 10 for the rest (written with separators,
        # so a bare 10-digit count or id is not taken for one).
        if len(digits) == 11:
            return digits[1:3] in ("50", "70", "80", "90")
        return len(digits) == 10 and any(sep in candidate for sep in "-( ")
    return len(digits) == 10


def _ipv6_ok(candidate: str) -> bool:
    try:
        ipaddress.IPv6Address(candidate.split("%", 1)[0])
    except ValueError:
        return False
    return True


def _ipv4_ok(candidate: str) -> bool:
    try:
        ipaddress.IPv4Address(candidate)
    except ValueError:
        return False
    return True


def _digit_run(candidate: str) -> Category | None:
    digits = _NON_DIGITS.sub("", candidate)
    if len(digits) == 12 and my_number_valid(digits):
        return "MY_NUMBER"
    if 13 <= len(digits) <= 19 and digits[0] in "23456" and luhn_valid(digits):
        return "CREDIT_CARD"
    return None


Check = Callable[[str], bool]
_PATTERNS: tuple[tuple[Category, re.Pattern[str], Check], ...] = (
    ("EMAIL", _EMAIL, lambda _: True),
    ("IP_ADDRESS", _IPV4, _ipv4_ok),
    ("IP_ADDRESS", _IPV6, _ipv6_ok),
    ("PHONE", _INTL_PHONE, _phone_digits_ok),
    ("PHONE", _JP_PHONE, _phone_digits_ok),
    ("PHONE", _NANP_PHONE, _phone_digits_ok),
)


class PiiDetector:
    """Every finding in a text, overlaps resolved (earliest first, then longest; patterns before names)."""

    def __init__(self, names: NameFinder | None = None, categories: Iterable[Category] = CATEGORIES) -> None:
        self._names = names
        self._categories = frozenset(categories)

    @property
    def finds_names(self) -> bool:
        return self._names is not None and "PERSON" in self._categories

    def find(self, text: str) -> list[Finding]:
        folded = fold(text)
        found: list[Finding] = []
        for match in _DIGIT_RUN.finditer(folded):
            category = _digit_run(match.group(0))
            if category is not None:
                found.append(Finding(category, match.start(), match.end()))
        for category, pattern, valid in _PATTERNS:
            found.extend(Finding(category, m.start(), m.end()) for m in pattern.finditer(folded) if valid(m.group(0)))
        if self._names is not None and "PERSON" in self._categories:
            found.extend(Finding("PERSON", start, end) for start, end in self._names.names(text))
        return _resolve([f for f in found if f.category in self._categories])


def _resolve(found: Sequence[Finding]) -> list[Finding]:
    order = {category: rank for rank, category in enumerate(CATEGORIES)}
    ranked = sorted(found, key=lambda f: (f.start, -(f.end - f.start), order[f.category]))
    kept: list[Finding] = []
    for finding in ranked:
        if kept and finding.start < kept[-1].end:
            continue
        kept.append(finding)
    return kept


class SpacyNames:
    """Person names from a spaCy pipeline installed as a package (``ja_ginza``: Japanese and English names).

    Loaded once at start-up; spaCy is imported here, not at module import, so a gateway without a name
    model never pays for it.
    """

    LABELS = frozenset({"PERSON", "Person"})

    def __init__(self, model: str) -> None:
        import spacy

        keep = {"tok2vec", "transformer", "ner"}
        nlp = spacy.load(model)
        for name in list(nlp.pipe_names):
            if name not in keep:
                nlp.remove_pipe(name)
        self._nlp = nlp

    def names(self, text: str) -> list[tuple[int, int]]:
        doc = self._nlp(text)
        return [(ent.start_char, ent.end_char) for ent in doc.ents if ent.label_ in self.LABELS]
