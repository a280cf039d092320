"""Split documents into retrieval-sized chunks, aware of Japanese sentence ends.

LangChain's recursive splitter does the work; the separators add the Japanese full stop and
comma, since Japanese text has no spaces for the usual fallbacks to split on.
"""

from __future__ import annotations

from langchain_text_splitters import RecursiveCharacterTextSplitter

SEPARATORS = ["\n\n", "\n", "。", ". ", "！", "？", "! ", "? ", "、", "; ", ", ", " ", ""]


class Chunker:
    def __init__(self, chunk_size: int, chunk_overlap: int) -> None:
        self._splitter = RecursiveCharacterTextSplitter(
            chunk_size=chunk_size,
            chunk_overlap=min(chunk_overlap, chunk_size // 2),
            separators=SEPARATORS,
            keep_separator="end",
            strip_whitespace=True,
        )

    def split(self, text: str) -> list[str]:
        return [chunk for chunk in self._splitter.split_text(text) if chunk.strip()]
