"""What every file parser returns: a document's sections, each with its heading path, in reading order.

The heading path travels with every chunk cut from a section (``Billing › Failed payments``): it is embedded with
the chunk, because a passage often only says "they are retried" and the heading names what "they" are, and it is
shown with the evidence, so a reader sees where in a manual a passage sits.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

PATH_SEPARATOR = " › "


class FileRejectedError(Exception):
    """A file the knowledge base will not index; ``status`` is the HTTP status its outcome carries."""

    status = 422

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class UnsupportedFileError(FileRejectedError):
    """A type no parser reads (415)."""

    status = 415


class UnreadableFileError(FileRejectedError):
    """A supported type whose bytes cannot be read: corrupt, encrypted, not in the encoding it claims (422)."""


class OversizeFileError(FileRejectedError):
    """Larger than the limit, as sent or once unpacked (413)."""

    status = 413


@dataclass(frozen=True, slots=True)
class Section:
    path: tuple[str, ...]  # the headings above this text, outermost first; empty before the first heading
    text: str
    table: bool = False  # kept whole when it fits one chunk: a row means little without its header

    @property
    def heading(self) -> str:
        return PATH_SEPARATOR.join(self.path)


@dataclass(frozen=True, slots=True)
class ParsedDocument:
    """One document read from a file: a file is one document, but a JSONL file holds many."""

    id: str
    title: str
    sections: list[Section]
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not any(s.text.strip() for s in self.sections)


class SectionBuilder:
    """Collects blocks under the current heading path, as parsers walk a document top to bottom."""

    def __init__(self) -> None:
        self._path: list[tuple[int, str]] = []
        self._blocks: list[str] = []
        self.sections: list[Section] = []

    def heading(self, level: int, text: str) -> None:
        self._flush()
        while self._path and self._path[-1][0] >= level:
            self._path.pop()
        if text.strip():
            self._path.append((level, " ".join(text.split())))

    def block(self, text: str) -> None:
        if text.strip():
            self._blocks.append(text.strip())

    def table(self, rows: list[list[str]]) -> None:
        lines = [" | ".join(" ".join(cell.split()) for cell in row) for row in rows if any(c.strip() for c in row)]
        if lines:
            self._flush()
            self.sections.append(Section(self.path, "\n".join(lines), table=True))

    @property
    def path(self) -> tuple[str, ...]:
        return tuple(text for _, text in self._path)

    def _flush(self) -> None:
        if self._blocks:
            self.sections.append(Section(self.path, "\n\n".join(self._blocks)))
            self._blocks = []

    def finish(self) -> list[Section]:
        self._flush()
        return self.sections
