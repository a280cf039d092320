"""PDF by pypdf (BSD-3): text per page, the outline's headings as the section path where the file has one.

Chosen over pdfminer.six by measurement (``tests/benchmarks/file_ingest.py``): both read Japanese text set in CID
fonts (Adobe-Japan1, as Japanese office tools write them) to the same characters; pypdf about three times faster.
Nothing in a PDF is run: JavaScript, forms and embedded files are never looked at, and an encrypted file is
refused rather than guessed at (an empty user password, which only restricts printing, still opens).
"""

from __future__ import annotations

import io
import re

from pypdf import PdfReader
from pypdf.errors import PyPdfError

from gateway.knowledge.files.sections import Section, UnreadableFileError

# A PDF's line breaks are where the page's column ended, not where a thought did: "retries the charge after four\n
# days." reads to a small model as two fragments. A break inside a sentence is a space in Latin text (the next line
# going on in lower case, a number or a bracket) and nothing between Japanese characters; a break after a full stop,
# before a capital, a bullet or a list item's number stays.
_LATIN_WRAP = re.compile(r"(?<=[^\s.!?:;])\n(?=[a-z(\[\"']|\d(?!\d*[.)]\s))")
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uff01-\uff5e、"
_CJK_WRAP = re.compile(rf"(?<=[{_CJK}])\n(?=[{_CJK}])")


def unwrap(text: str) -> str:
    """The page's text with its soft line breaks joined (see above)."""
    return _CJK_WRAP.sub("", _LATIN_WRAP.sub(" ", text))


def _outline_pages(reader: PdfReader) -> dict[int, tuple[str, ...]]:
    """Page index → the heading path of the outline entries starting on that page (the last one on it wins)."""
    starts: dict[int, tuple[str, ...]] = {}

    def walk(entries: list[object], path: tuple[str, ...]) -> None:
        last: tuple[str, ...] = path
        for entry in entries:
            if isinstance(entry, list):
                walk(entry, last)
                continue
            title = str(getattr(entry, "title", "") or "").strip()
            try:
                page = reader.get_destination_page_number(entry)  # type: ignore[arg-type]
            except (PyPdfError, KeyError, TypeError, ValueError):
                continue
            last = (*path, title) if title else path
            if page is not None and page >= 0:
                starts[page] = last

    try:
        walk(list(reader.outline), ())
    except (PyPdfError, KeyError, TypeError, ValueError):
        return {}
    return starts


def read_pdf(data: bytes) -> tuple[str, list[Section]]:
    """The document's title (its metadata's, if set) and one section per page, under the outline's headings."""
    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted and not reader.decrypt(""):
            raise UnreadableFileError("the PDF is encrypted; upload a copy without a password")
        title = str(reader.metadata.title or "").strip() if reader.metadata is not None else ""
        headings = _outline_pages(reader)
        sections: list[Section] = []
        path: tuple[str, ...] = ()
        for number, page in enumerate(reader.pages):
            path = headings.get(number, path)
            text = unwrap(page.extract_text() or "")
            if text.strip():
                sections.append(Section((*path, f"p. {number + 1}"), text.strip()))
    except UnreadableFileError:
        raise
    except (PyPdfError, ValueError, KeyError, TypeError, OSError) as exc:
        raise UnreadableFileError(f"not a readable PDF ({exc})") from exc
    return title, sections
