"""Split documents into retrieval-sized chunks, aware of Japanese sentence ends and of a file's sections.

LangChain's recursive splitter does the work; the separators add the Japanese full stop and
comma, since Japanese text has no spaces for the usual fallbacks to split on. A document read from a file is
chunked section by section, so no chunk straddles two headings, and a table is kept whole while it fits twice
the chunk size (a row is meaningless without its header); a longer one is cut between rows, each piece led by
the header row.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from langchain_text_splitters import RecursiveCharacterTextSplitter

from gateway.knowledge.files.sections import Section

SEPARATORS = ["\n\n", "\n", "。", ". ", "！", "？", "! ", "? ", "、", "; ", ", ", " ", ""]
TABLE_FACTOR = 2


@dataclass(frozen=True, slots=True)
class Piece:
    """One chunk's text and the heading path of the section it came from ("" when the document has none)."""

    text: str
    heading: str = ""


class Chunker:
    def __init__(self, chunk_size: int, chunk_overlap: int) -> None:
        self._size = chunk_size
        self._splitter = RecursiveCharacterTextSplitter(
            chunk_size=chunk_size,
            chunk_overlap=min(chunk_overlap, chunk_size // 2),
            separators=SEPARATORS,
            keep_separator="end",
            strip_whitespace=True,
        )

    def split(self, text: str) -> list[str]:
        return [chunk for chunk in self._splitter.split_text(text) if chunk.strip()]

    def split_sections(self, sections: Sequence[Section]) -> list[Piece]:
        pieces: list[Piece] = []
        for section in sections:
            texts = self._table(section.text) if section.table else self.split(section.text)
            pieces.extend(Piece(text, section.heading) for text in texts)
        return pieces

    def _table(self, text: str) -> list[str]:
        if len(text) <= self._size * TABLE_FACTOR:
            return [text]
        header, *rows = text.split("\n")
        pieces: list[str] = []
        current: list[str] = []
        for row in rows:
            if current and len(header) + sum(len(r) + 1 for r in current) + len(row) > self._size * TABLE_FACTOR:
                pieces.append("\n".join([header, *current]))
                current = []
            current.append(row)
        if current:
            pieces.append("\n".join([header, *current]))
        return pieces
