"""Plain text and JSONL of documents: bytes to ``str`` in the encoding the file is in.

UTF-8 (with or without a byte-order mark) and UTF-16 with one are taken as they say; anything else is guessed by
charset-normalizer (MIT), since Japanese teams' files are often still Shift_JIS (CP932) or EUC-JP. A file that is
binary, or that no encoding reads without damage, is refused rather than indexed as mojibake.
"""

from __future__ import annotations

import codecs
import re

import msgspec
from charset_normalizer import from_bytes

from gateway.knowledge.files.sections import ParsedDocument, Section, UnreadableFileError
from gateway.knowledge.schemas import DocumentIn

_PARAGRAPHS = re.compile(r"\n\s*\n")
MAX_CHAOS = 0.2  # charset-normalizer's share of unlikely characters above which a guess is not trusted


def decode(data: bytes) -> str:
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        try:
            return data.decode("utf-16")
        except UnicodeDecodeError as exc:
            raise UnreadableFileError(f"not valid UTF-16 text ({exc.reason} at byte {exc.start})") from exc
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        guess = from_bytes(data).best()
        if guess is None or guess.chaos > MAX_CHAOS:
            reason = "not text in an encoding this service reads (UTF-8, UTF-16, Shift_JIS, …)"
            raise UnreadableFileError(reason) from None
        text = str(guess)
    if "\x00" in text:
        raise UnreadableFileError("binary content in a text file")
    return text


def read_text(data: bytes) -> list[Section]:
    """One section of the whole text: a plain file has no headings to go by (its paragraphs guide the chunker)."""
    text = decode(data).strip()
    return [Section((), text)] if text else []


def read_jsonl(data: bytes) -> list[ParsedDocument]:
    """One document per line, in the documents API's own shape (``id``, ``text``, optional ``title``, ``metadata``)."""
    documents: list[ParsedDocument] = []
    seen: set[str] = set()
    for number, line in enumerate(decode(data).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = msgspec.json.decode(line, type=DocumentIn)
        except msgspec.ValidationError as exc:
            raise UnreadableFileError(f"line {number}: {exc}") from exc
        except msgspec.DecodeError as exc:
            raise UnreadableFileError(f"line {number} is not JSON ({exc})") from exc
        if record.id in seen:
            raise UnreadableFileError(f"line {number}: document id {record.id!r} appears twice")
        seen.add(record.id)
        sections = [Section((), record.text)]
        documents.append(ParsedDocument(record.id, record.title or "", sections, record.metadata or {}))
    return documents
