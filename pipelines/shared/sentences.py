"""Sentences of an answer as it streams in: the unit the support gate checks and the client receives.

A sentence ends at a line break, at Japanese ``。！？``, or at English ``. ! ?`` followed by a space and a
word that can start a sentence; a citation marker after the stop (``... in 1066. [2]``) stays with the sentence
it cites, and a citation with no stop before it ends an English sentence when a capitalised word follows
("Navvulata [1] It was..."). A stop is not an end after an abbreviation ("Dr.", "e.g."), an initial ("J. K.
Rowling"), a list number ("2. Then"), or inside a number or a name ("3.5", "example.com"): nothing but a space
follows a real stop.

The splitter is incremental and decides an end only once it has seen the character after it, so the sentences
of an answer fed token by token are exactly those of the whole answer fed at once: streaming and non-streaming
answers are cut, checked and joined alike. Sentence segmenters on PyPI (pysbd, NLTK's punkt, blingfire) take a
whole text and would move a trailing citation to the next sentence; an incremental split is what a stream needs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Words an English sentence does not end after when a period follows them (compared without case and periods).
ABBREVIATIONS = frozenset(
    (
        "mr",
        "mrs",
        "ms",
        "dr",
        "prof",
        "sr",
        "jr",
        "st",
        "mt",
        "vs",
        "etc",
        "eg",
        "ie",
        "cf",
        "al",
        "inc",
        "ltd",
        "co",
        "corp",
        "fig",
        "figs",
        "approx",
        "dept",
        "univ",
        "lt",
        "sgt",
        "capt",
        "rev",
        "hon",
        "ave",
        "blvd",
        "jan",
        "feb",
        "mar",
        "apr",
        "jun",
        "jul",
        "aug",
        "sep",
        "sept",
        "oct",
        "nov",
        "dec",
        "vol",
        "pp",
    )
)
_CJK_STOPS = "。！？"
_LATIN_STOPS = ".!?"
_CLOSERS = "\"'”’)]）」』】"
_CITATION = re.compile(r"\s*\[\d{1,3}(?:\s*,\s*\d{1,3})*\]")
# What a citation marker looks like while it is still arriving: "[", "[1", "[1, 2".
_CITATION_PREFIX = re.compile(r"\s*(?:\[(?:\d{1,3}(?:\s*,\s*\d{0,3})*)?)?$")
_WORD_BEFORE = re.compile(r"([A-Za-z][A-Za-z.]*)$")
_LIST_NUMBER = re.compile(r"^\s*(?:\d{1,3}|[A-Za-z])$")
# A cited fragment without a full stop ("Navvulata [1]") ends where a capitalised word follows its citation: else an
# invented sentence after it would be checked, and withheld, together with it.
_CITATION_TAIL = re.compile(r"\[\d{1,3}(?:\s*,\s*\d{1,3})*\]$")
_NEW_LATIN_SENTENCE = re.compile(r"\s+[A-Z]")
_MORE = object()  # the stop's fate depends on text not yet arrived


@dataclass(frozen=True, slots=True)
class Sentence:
    """One sentence: ``lead`` is the white space before it in the answer (a space, a line break, none)."""

    lead: str
    text: str

    @property
    def raw(self) -> str:
        return self.lead + self.text


class SentenceSplitter:
    """``feed`` text as it arrives and get the sentences it completed; ``close`` gives the rest."""

    def __init__(self) -> None:
        self._buffer = ""

    def feed(self, text: str) -> list[Sentence]:
        self._buffer += text
        done: list[Sentence] = []
        while (end := _first_end(self._buffer)) is not None:
            done.append(_sentence(self._buffer[:end]))
            self._buffer = self._buffer[end:]
        return done

    def close(self) -> list[Sentence]:
        rest, self._buffer = self._buffer, ""
        return [_sentence(rest)] if rest.strip() else []


def split_sentences(text: str) -> list[Sentence]:
    """A whole text's sentences, as :class:`SentenceSplitter` cuts it."""
    splitter = SentenceSplitter()
    return [*splitter.feed(text), *splitter.close()]


def _sentence(raw: str) -> Sentence:
    body = raw.lstrip()
    return Sentence(lead=raw[: len(raw) - len(body)], text=body.rstrip())


def _first_end(buffer: str) -> int | None:
    """Where the first complete sentence of ``buffer`` ends (its length), or None while undecided."""
    start = len(buffer) - len(buffer.lstrip())
    for index in range(start, len(buffer)):
        char = buffer[index]
        if char == "\n":
            if buffer[start:index].strip():
                return index
            continue
        if char == "]" and _CITATION_TAIL.search(buffer, start, index + 1):
            rest = buffer[index + 1 :]
            if not rest.strip():
                return None  # the next word decides
            if _NEW_LATIN_SENTENCE.match(rest):
                return index + 1
            continue
        if char in _CJK_STOPS or char in _LATIN_STOPS:
            end = _end_after_stop(buffer, start, index)
            if end is _MORE:
                return None
            if isinstance(end, int):
                return end
    return None


def _end_after_stop(buffer: str, start: int, stop: int) -> int | object | None:
    """The sentence's end for the stop at ``stop``: an index, ``_MORE`` (wait for more text), or None (no end)."""
    char = buffer[stop]
    after = stop + 1
    if char in _LATIN_STOPS:
        if after < len(buffer) and buffer[after] in _LATIN_STOPS:  # "..." or "?!": the last one decides
            return None
        if char == "." and _not_a_period_end(buffer[start:stop]):
            return None
    while after < len(buffer) and buffer[after] in _CLOSERS and not _CITATION.match(buffer, after):
        after += 1
    while (marker := _CITATION.match(buffer, after)) is not None:
        after = marker.end()
    rest = buffer[after:]
    if _CITATION_PREFIX.fullmatch(rest):
        return _MORE  # a citation (or the word after the space) may still be arriving
    if char in _CJK_STOPS:
        return after
    if not rest[0].isspace():
        return None  # "3.5", "e.g.the", "U.S.A": a stop inside a token
    following = rest.lstrip()
    if not following:
        return _MORE
    return None if following[0].islower() else after


def _not_a_period_end(before: str) -> bool:
    """A period after an abbreviation, an initial or a list number does not end the sentence."""
    if _LIST_NUMBER.match(before):
        return True
    word = _WORD_BEFORE.search(before)
    if word is None:
        return False
    token = word.group(1)
    bare = token.replace(".", "").lower()
    return bare in ABBREVIATIONS or (len(bare) == 1 and token[-1].isupper()) or "." in token
