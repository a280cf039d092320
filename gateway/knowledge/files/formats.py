"""Which parser reads a file: by its name's extension, checked against what its first bytes are.

A file's name is what a folder sync or a browser sends reliably; its declared content type is not (browsers send
``application/octet-stream`` for Markdown). The bytes must agree with the extension (a PDF starts ``%PDF-``, a
``.docx`` is a zip), so a renamed executable is refused, not handed to a parser that expects something else.
"""

from __future__ import annotations

import hashlib
import posixpath
from collections.abc import Callable
from pathlib import PurePosixPath

from gateway.knowledge.files.docx import read_docx
from gateway.knowledge.files.html import read_html
from gateway.knowledge.files.markdown import read_markdown
from gateway.knowledge.files.pdf import read_pdf
from gateway.knowledge.files.sections import (
    OversizeFileError,
    ParsedDocument,
    Section,
    UnreadableFileError,
    UnsupportedFileError,
)
from gateway.knowledge.files.text import decode, read_jsonl, read_text
from gateway.settings import RequestLimits

SUPPORTED = {
    ".md": "markdown",
    ".markdown": "markdown",
    ".txt": "text",
    ".text": "text",
    ".html": "html",
    ".htm": "html",
    ".pdf": "pdf",
    ".docx": "docx",
    ".jsonl": "jsonl",
}


def document_path(name: str) -> str:
    """The id a file's document gets: its path as sent, with forward slashes and nothing above its root."""
    path = posixpath.normpath(name.replace("\\", "/")).lstrip("/")
    if not path or path == "." or path.startswith("../") or path == ".." or len(path) > 256:
        raise UnreadableFileError(f"{name!r} is not a usable file path (relative, at most 256 characters)")
    return path


def kind_of(name: str) -> str:
    kind = SUPPORTED.get(PurePosixPath(name).suffix.lower())
    if kind is None:
        raise UnsupportedFileError(
            f"{PurePosixPath(name).suffix or 'no extension'}: not a supported type ({', '.join(sorted(SUPPORTED))})"
        )
    return kind


def _one(path: str, title: str, sections: list[Section]) -> list[ParsedDocument]:
    """A file's one document. A top heading that is the title itself is not repeated in every section's path."""
    if title and sections and all(s.path[:1] == (title,) for s in sections):
        sections = [Section(s.path[1:], s.text, s.table) for s in sections]
    return [ParsedDocument(path, title or PurePosixPath(path).stem, sections)]


def read_file(name: str, data: bytes, limits: RequestLimits) -> list[ParsedDocument]:
    """The documents in one uploaded file, each tagged with the file's path and content hash.

    Raises a :class:`~gateway.knowledge.files.sections.FileRejectedError` saying why a file cannot be indexed.
    """
    path = document_path(name)
    kind = kind_of(path)
    if len(data) > limits.max_file_bytes:
        raise OversizeFileError(f"{len(data)} bytes; the limit is {limits.max_file_bytes} per file")
    if not data.strip():
        raise UnreadableFileError("the file is empty")
    readers: dict[str, Callable[[], list[ParsedDocument]]] = {
        "markdown": lambda: _one(path, *read_markdown(decode(data))),
        "html": lambda: _one(path, *read_html(decode(data))),
        "text": lambda: _one(path, "", read_text(data)),
        "pdf": lambda: _one(path, *read_pdf(_starting(data, b"%PDF-", "PDF"))),
        "docx": lambda: _one(path, *read_docx(_starting(data, b"PK\x03\x04", "zip"), limits.max_unpacked_bytes)),
        "jsonl": lambda: read_jsonl(data),
    }
    documents = readers[kind]()
    if not documents or all(d.empty for d in documents):
        raise UnreadableFileError("no text in the file (a scanned PDF needs OCR first)")
    digest = hashlib.sha256(data).hexdigest()
    return [
        ParsedDocument(d.id, d.title, d.sections, {**d.metadata, "source": path, "sha256": digest, "type": kind})
        for d in documents
    ]


def _starting(data: bytes, magic: bytes, what: str) -> bytes:
    if not data[:1024].lstrip().startswith(magic):
        raise UnreadableFileError(f"the content is not a {what}")
    return data
