"""Word ``.docx`` by python-docx (MIT): heading styles make the section path, tables are kept as rows.

A ``.docx`` is a zip of XML parts. Its sizes are checked before anything is unpacked (a zip bomb inflates a few
kilobytes into gigabytes), python-docx's XML parser resolves no entities (nothing outside the file is read), and a
macro-enabled document (``.docm``) is refused by its content type: its macros are never looked at, let alone run.
"""

from __future__ import annotations

import io
import re
import zipfile

import docx
from docx.opc.exceptions import PackageNotFoundError
from docx.table import Table
from docx.text.paragraph import Paragraph
from lxml.etree import LxmlError

from gateway.knowledge.files.sections import OversizeFileError, Section, SectionBuilder, UnreadableFileError

_HEADING = re.compile(r"^(?:Heading|見出し)\s*(\d)$")
MAX_RATIO = 100  # a text-heavy .docx unpacks to 3-10x its size; a bomb to thousands


def check_archive(data: bytes, max_unpacked_bytes: int) -> None:
    """Refuse a zip whose parts would unpack past ``max_unpacked_bytes`` or at a bomb's ratio, before unpacking."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            infos = archive.infolist()
    except (zipfile.BadZipFile, ValueError) as exc:
        raise UnreadableFileError(f"not a readable .docx (a damaged zip: {exc})") from exc
    unpacked = sum(info.file_size for info in infos)
    packed = sum(info.compress_size for info in infos)
    if unpacked > max_unpacked_bytes or unpacked > MAX_RATIO * max(packed, 1) + 1024 * 1024:
        raise OversizeFileError(
            f"the .docx would unpack to {unpacked} bytes from {packed}; the limit is {max_unpacked_bytes}"
        )


def _level(paragraph: Paragraph) -> int | None:
    name = paragraph.style.name if paragraph.style is not None else ""
    if name == "Title":
        return 1
    match = _HEADING.match(name or "")
    return int(match.group(1)) + 1 if match else None  # below the document's Title


def read_docx(data: bytes, max_unpacked_bytes: int) -> tuple[str, list[Section]]:
    """The core properties' title (else the Title-styled paragraph) and the sections."""
    check_archive(data, max_unpacked_bytes)
    try:
        document = docx.Document(io.BytesIO(data))
    except (PackageNotFoundError, ValueError, KeyError, LxmlError, zipfile.BadZipFile) as exc:
        raise UnreadableFileError(f"not a readable .docx ({exc})") from exc
    title = (document.core_properties.title or "").strip()
    sections = SectionBuilder()
    for item in document.iter_inner_content():
        if isinstance(item, Table):
            sections.table([[cell.text for cell in row.cells] for row in item.rows])
            continue
        level = _level(item)
        if level is None:
            sections.block(item.text)
        else:
            title = title or (item.text.strip() if level == 1 else "")
            sections.heading(level, item.text)
    return title, sections.finish()
