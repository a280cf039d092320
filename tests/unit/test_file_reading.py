"""Reading files: every type in English and Japanese to sections under their headings, and every way a file is
refused (its status and reason), nothing in a file ever run or fetched."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest
from pypdf import PdfWriter

from gateway.knowledge.chunking import Chunker
from gateway.knowledge.files.formats import read_file
from gateway.knowledge.files.pdf import unwrap
from gateway.knowledge.files.sections import (
    FileRejectedError,
    OversizeFileError,
    Section,
    UnreadableFileError,
    UnsupportedFileError,
)
from gateway.settings import RequestLimits
from tests.sample_files import FACTS, OTHER, sample, with_part, word

LIMITS = RequestLimits(max_file_bytes=1_000_000, max_unpacked_bytes=5_000_000)


def fact_section(kind: str, lang: str) -> Section:
    name, data = sample(kind, lang)
    (document,) = [
        d for d in read_file(name, data, LIMITS) if FACTS[lang].answer in "".join(s.text for s in d.sections)
    ]
    return next(s for s in document.sections if FACTS[lang].answer in s.text.replace("\n", ""))


@pytest.mark.parametrize("lang", ["en", "ja"])
@pytest.mark.parametrize("kind", ["md", "html", "docx", "pdf"])
def test_a_fact_is_read_under_its_heading_path(kind: str, lang: str) -> None:
    fact = FACTS[lang]
    section = fact_section(kind, lang)
    assert section.path[:2] == (fact.chapter, fact.section)  # not the title: that is the document's
    assert "".join(fact.text.split()) in "".join(section.text.split())


@pytest.mark.parametrize("lang", ["en", "ja"])
def test_every_section_of_a_file_is_kept_in_order_and_the_title_is_the_files(lang: str) -> None:
    name, data = sample("docx", lang)
    (document,) = read_file(name, data, LIMITS)
    assert document.id == f"{lang}/handbook.docx"
    assert document.title == FACTS[lang].title
    assert [s.path for s in document.sections] == [
        (FACTS[lang].chapter, FACTS[lang].section),
        (FACTS[lang].chapter, FACTS[lang].section),
        OTHER[lang][:2],
    ]
    assert document.sections[1] == Section(document.sections[1].path, "plan | price\nbasic | 10", table=True)
    assert document.metadata["source"] == name
    assert document.metadata["type"] == "docx"
    assert len(document.metadata["sha256"]) == 64


@pytest.mark.parametrize("lang", ["en", "ja"])
def test_plain_text_and_jsonl(lang: str) -> None:
    name, data = sample("txt", lang)
    (document,) = read_file(name, data, LIMITS)
    assert FACTS[lang].text in document.sections[0].text
    assert document.sections[0].path == ()
    name, data = sample("jsonl", lang)
    documents = read_file(name, data, LIMITS)
    assert [d.id for d in documents] == [f"{lang}-billing", f"{lang}-support"]
    assert {d.metadata["source"] for d in documents} == {name}


def test_japanese_text_in_shift_jis_is_read() -> None:
    data = f"{FACTS['ja'].title}\n\n{FACTS['ja'].text}\n".encode("cp932")
    (document,) = read_file("ja/legacy.txt", data, LIMITS)
    assert FACTS["ja"].text in document.sections[0].text


def test_html_scripts_and_styles_never_become_text() -> None:
    page = b"<html><head><style>p{color:red}</style></head><body><p>Kept.</p><script>steal()</script></body></html>"
    (document,) = read_file("page.html", page, LIMITS)
    assert [s.text for s in document.sections] == ["Kept."]


def test_a_long_table_is_cut_between_rows_each_piece_led_by_its_header() -> None:
    rows = "\n".join(f"| plan {i} | {i * 10} |" for i in range(60))
    (document,) = read_file("prices.md", f"# Prices\n\n| plan | price |\n|---|---|\n{rows}\n".encode(), LIMITS)
    pieces = Chunker(200, 20).split_sections(document.sections)
    assert len(pieces) > 1
    assert all(p.text.startswith("plan | price\n") for p in pieces)
    assert sum(p.text.count("\n") for p in pieces) == 60  # every row once


def encrypted_pdf() -> bytes:
    writer = PdfWriter(clone_from=io.BytesIO(sample("pdf", "en")[1]))
    writer.encrypt(user_password="secret", algorithm="AES-256")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


@pytest.mark.parametrize("lang", ["en", "ja"])
def test_a_pdf_locked_by_an_owner_password_only_is_read(lang: str) -> None:
    """Exported manuals often carry an owner password (no printing, no editing) and open without one: AES needs
    pypdf's crypto extra to decrypt them with the empty user password."""
    writer = PdfWriter(clone_from=io.BytesIO(sample("pdf", lang)[1]))
    writer.encrypt(user_password="", owner_password="owner-only", algorithm="AES-256")
    out = io.BytesIO()
    writer.write(out)
    (document,) = read_file("locked.pdf", out.getvalue(), LIMITS)
    assert FACTS[lang].answer in "".join(s.text for s in document.sections).replace("\n", "")


def zip_bomb() -> bytes:
    """A .docx whose one extra part inflates from about 100 KB to 100 MB."""
    return with_part(word(FACTS["en"]), "word/media/padding.bin", b"\0" * 100_000_000)


def macro_enabled() -> bytes:
    content_types = zipfile.ZipFile(io.BytesIO(word(FACTS["en"]))).read("[Content_Types].xml")
    macro = content_types.replace(
        b"application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml",
        b"application/vnd.ms-word.document.macroEnabled.main+xml",
    )
    return with_part(word(FACTS["en"]), "[Content_Types].xml", macro)


REFUSED = {
    "unsupported type": ("tool.exe", b"MZ\x90\x00", UnsupportedFileError),
    "no extension": ("Makefile", b"all:\n", UnsupportedFileError),
    "a renamed executable": ("manual.pdf", b"MZ\x90\x00\x03" + b"\0" * 100, UnreadableFileError),
    "a corrupt PDF": ("manual.pdf", sample("pdf", "en")[1][:400], UnreadableFileError),
    "an encrypted PDF": ("manual.pdf", encrypted_pdf(), UnreadableFileError),
    "a damaged .docx": ("manual.docx", word(FACTS["en"])[:300], UnreadableFileError),
    "a .docx zip bomb": ("manual.docx", zip_bomb(), OversizeFileError),
    "a macro-enabled document as .docx": ("manual.docx", macro_enabled(), UnreadableFileError),
    "an empty file": ("notes.md", b"  \n", UnreadableFileError),
    "binary in a .txt": ("notes.txt", bytes(range(256)) * 8, UnreadableFileError),
    "a bad JSONL line": ("docs.jsonl", b'{"id": "a", "text": "ok"}\n{"id": "b"}\n', UnreadableFileError),
    "a path above its root": ("../etc/notes.md", b"# x\n\ny\n", UnreadableFileError),
    "too large": ("big.md", b"x" * (LIMITS.max_file_bytes + 1), OversizeFileError),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_a_file_that_cannot_be_indexed_is_refused_with_its_reason(case: str) -> None:
    name, data, error = REFUSED[case]
    with pytest.raises(FileRejectedError) as refused:
        read_file(name, data, LIMITS)
    assert type(refused.value) is error
    assert refused.value.status == {UnsupportedFileError: 415, UnreadableFileError: 422, OversizeFileError: 413}[error]
    assert refused.value.reason


def test_an_external_entity_in_a_docx_is_never_resolved(tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET-VALUE")
    body = (
        f'<?xml version="1.0"?><!DOCTYPE d [<!ENTITY x SYSTEM "file://{secret}">]>'
        '<w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"><w:body>'
        "<w:p><w:r><w:t>Before &x; after</w:t></w:r></w:p></w:body></w:document>"
    ).encode()
    (document,) = read_file("x.docx", with_part(word(FACTS["en"]), "word/document.xml", body), LIMITS)
    assert "Before" in document.sections[0].text
    assert "TOP-SECRET-VALUE" not in " ".join(s.text for s in document.sections)


@pytest.mark.parametrize(
    ("page", "read"),
    [
        ("retries the charge after four\ndays. Then", "retries the charge after four days. Then"),
        ("lifts\n150 kg (see\n[2])", "lifts 150 kg (see [2])"),
        ("Steps:\n1. Open the app\n2. Save", "Steps:\n1. Open the app\n2. Save"),
        ("The end.\nNext Heading", "The end.\nNext Heading"),
        ("五日後に自動で再請\n求します。\n第二章", "五日後に自動で再請求します。\n第二章"),
    ],
)
def test_a_pdf_pages_soft_line_breaks_are_joined_and_its_real_ones_kept(page: str, read: str) -> None:
    assert unwrap(page) == read
