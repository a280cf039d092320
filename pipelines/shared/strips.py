"""CRAG knowledge strips: passages cut into sentences (or small windows of short ones)."""

from __future__ import annotations

import re

_SENTENCE_END = re.compile(r"(?<=[.!?。！？])\s+|(?<=[。！？])")
_CJK = re.compile(r"[\u3040-\u30ff\u4e00-\u9fff]")
MIN_STRIP_CHARS = 40


def _weight(text: str) -> int:
    """Length in Latin-character equivalents: a kanji or kana carries about three letters' worth."""
    return len(text) + 2 * len(_CJK.findall(text))


def split_strips(text: str) -> list[str]:
    """Sentences, with very short ones joined to the next so a strip carries a statement."""
    sentences = [s.strip() for s in _SENTENCE_END.split(text) if s and s.strip()]
    strips: list[str] = []
    pending = ""
    for sentence in sentences:
        pending = f"{pending} {sentence}".strip() if pending else sentence
        if _weight(pending) >= MIN_STRIP_CHARS:
            strips.append(pending)
            pending = ""
    if pending:
        if strips:
            strips[-1] = f"{strips[-1]} {pending}"
        else:
            strips.append(pending)
    return strips
