"""Citation markers in answers: which passages an answer cites, markers of passages that do not exist, and replies
that are citation numbers alone.

Small models cite as they were asked ("... in 1066 [1].") but also count "[1] [2] ... [42]" until their token
limit, or stop before the claim ("The maximum payload is [1]."). These helpers read and clean the markers; the
sentence gate (:mod:`pipelines.shared.sentence_gate`) and the critics decide on what is left.
"""

from __future__ import annotations

import re

from pipelines.shared.deps import Passage
from pipelines.shared.text import has_cjk, tokens

_CITATION = re.compile(r"\[(\d{1,2})(?:\s*,\s*(\d{1,2}))*\]")
_NUMBERS = re.compile(r"\d{1,2}")
# A citation marker with the space before it: removed from claims and from answers, whatever its numbers.
CITATION_MARKER = re.compile(r"\s*\[\d{1,3}(?:\s*,\s*\d{1,3})*\]")
_SPACE_BEFORE_STOP = re.compile(r"\s+([.,;:!?。])")
# A last word after which an English sentence cannot end: the answer was cut off before it said anything.
# Prepositions are not among them: "300 kg, as stated in [1]" is how small models cite.
_DANGLING = frozenset(["is", "are", "was", "were", "be", "the", "an"])


def cited_passages(answer: str, passages: list[Passage]) -> list[Passage]:
    """Passages the answer cites by number, in citation order, without repeats."""
    chosen: list[Passage] = []
    for match in _CITATION.finditer(answer):
        for number in _NUMBERS.findall(match.group(0)):
            index = int(number) - 1
            if 0 <= index < len(passages) and passages[index] not in chosen:
                chosen.append(passages[index])
    return chosen


def drop_phantom_citations(answer: str, passages: int) -> str:
    """The answer without citation markers of passages that do not exist.

    A small model can fall into counting "[1] [2] ... [42]" until max_tokens; those markers cite
    nothing, and left in they hide that the sentence before them never ended.
    """

    def keep(match: re.Match[str]) -> str:
        numbers = [n for n in re.findall(r"\d+", match.group(0)) if 1 <= int(n) <= passages]
        return f" [{', '.join(numbers)}]" if numbers else ""

    cleaned = CITATION_MARKER.sub(keep, answer)
    return _SPACE_BEFORE_STOP.sub(r"\1", cleaned).strip()


def states_nothing(answer: str) -> bool:
    """A reply that makes no claim, so every lexical check passes it: citation numbers alone ("[1] [2]"),
    which small models produce over terse strips, or a sentence broken off before its answer
    ("The maximum payload of the robot is [1]."). Words are the shared tokenizer's, so a Japanese
    reply is its bigrams, not one space-less "word"."""
    words = [w for w in tokens(_CITATION.sub(" ", answer)) if len(w) > 1 or has_cjk(w)]
    return not words or words[-1] in _DANGLING
