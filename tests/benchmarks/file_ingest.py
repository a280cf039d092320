"""Files to searchable: chunks per second on this machine, a 1,000-page mixed manual, and what bounds it.

    python -m tests.benchmarks.file_ingest [--pages 1000]

Builds a manual of ``--pages`` pages (about 1,800 characters each, the text of the shared sets' SQuAD and JSQuAD
paragraphs under chapter and section headings): two fifths as PDF (half English, half Japanese in a CID font), a
fifth each as Word, Markdown and HTML, in files of 25 pages. Then:

1. **PDF readers** on the same English and Japanese PDFs: pypdf and pdfminer.six, seconds per page and whether the
   two read the same characters (the choice of PDF reader);
2. **phases, one at a time**: reading the files (``read_file``), chunking, embedding the chunks with the default
   embeddings (USE, in process) and writing them to LanceDB: seconds each and their share, which says what bounds
   ingestion;
3. **end to end**: the files uploaded through ``POST /v1/files`` of an in-process app (batches of 16 files, as
   ``python -m gateway.ingest`` sends them), until the last batch's answer and the store listing the last file
   (searchable, not just accepted). Chunks per second and the total.

Results: ``tests/benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import docx
from litestar.testing import AsyncTestClient
from pdfminer.high_level import extract_text
from pypdf import PdfReader
from reportlab.pdfbase import pdfmetrics
from reportlab.pdfbase.cidfonts import UnicodeCIDFont
from reportlab.pdfgen import canvas

from gateway.app import create_app
from gateway.knowledge.chunking import Chunker
from gateway.knowledge.files.formats import read_file
from gateway.overrides import ProviderOverrides
from gateway.providers.embeddings import USEEmbeddings
from gateway.providers.vectorstores.base import ChunkRecord
from gateway.providers.vectorstores.lance import LanceVectorStore
from gateway.settings import Settings
from routes.offline.eval.datasets import load
from routes.offline.eval.sentence_answers import DATA

PAGE_CHARS = 1800
PAGES_PER_FILE = 25
BATCH = 16
JA_FONT = "HeiseiKakuGo-W5"


def paragraphs(lang: str) -> Iterator[str]:
    """Real prose, endlessly: the shared sets' paragraphs in turn."""
    name = "squad_v2_dev_normans.json" if lang == "en" else "jsquad_valid_sample.json"
    texts = list(dict.fromkeys(d["text"] for d in load(DATA / name).documents))
    while True:
        yield from texts


def pages(lang: str, count: int, source: Iterator[str]) -> list[tuple[str, str, str]]:
    """``count`` pages as (chapter, section, text)."""
    chapter, section = ("Chapter", "Section") if lang == "en" else ("第", "節")
    out = []
    for number in range(count):
        text = ""
        while len(text) < PAGE_CHARS:
            text += next(source) + "\n\n"
        out.append((f"{chapter} {number // 10 + 1}", f"{section} {number + 1}", text.strip()))
    return out


def pdf(lang: str, content: list[tuple[str, str, str]]) -> bytes:
    font = "Helvetica"
    if lang == "ja":
        pdfmetrics.registerFont(UnicodeCIDFont(JA_FONT))
        font = JA_FONT
    buffer = io.BytesIO()
    page = canvas.Canvas(buffer)
    width = 45 if lang == "ja" else 95
    for number, (chapter, section, text) in enumerate(content):
        page.bookmarkPage(f"c{number}")
        page.bookmarkPage(f"s{number}")
        if number % 10 == 0:
            page.addOutlineEntry(chapter, f"c{number}", level=0)
        page.addOutlineEntry(section, f"s{number}", level=1)
        page.setFont(font, 8)
        y = 820
        flat = " ".join(text.split()) if lang == "en" else "".join(text.split())
        for start in range(0, len(flat), width):
            page.drawString(20, y, flat[start : start + width])
            y -= 10
        page.showPage()
    page.save()
    return buffer.getvalue()


def word(content: list[tuple[str, str, str]]) -> bytes:
    document = docx.Document()
    chapter = ""
    for this_chapter, section, text in content:
        if this_chapter != chapter:
            document.add_heading(this_chapter, level=1)
            chapter = this_chapter
        document.add_heading(section, level=2)
        for paragraph in text.split("\n\n"):
            document.add_paragraph(paragraph)
    buffer = io.BytesIO()
    document.save(buffer)
    return buffer.getvalue()


def markdown(content: list[tuple[str, str, str]]) -> bytes:
    return "\n\n".join(f"# {c}\n\n## {s}\n\n{t}" for c, s, t in content).encode()


def html(content: list[tuple[str, str, str]]) -> bytes:
    body = "".join(f"<h1>{c}</h1><h2>{s}</h2>" + "".join(f"<p>{p}</p>" for p in t.split("\n\n")) for c, s, t in content)
    return f"<html><head><title>Manual</title></head><body>{body}</body></html>".encode()


def manual(total_pages: int) -> list[tuple[str, bytes]]:
    sources = {"en": paragraphs("en"), "ja": paragraphs("ja")}
    shares = [("pdf", "en", 0.2), ("pdf", "ja", 0.2), ("docx", "en", 0.1), ("docx", "ja", 0.1)]
    shares += [("md", "en", 0.1), ("md", "ja", 0.1), ("html", "en", 0.1), ("html", "ja", 0.1)]
    files: list[tuple[str, bytes]] = []
    for kind, lang, share in shares:
        remaining = round(total_pages * share)
        index = 0
        while remaining > 0:
            content = pages(lang, min(PAGES_PER_FILE, remaining), sources[lang])
            remaining -= len(content)
            data = pdf(lang, content) if kind == "pdf" else {"docx": word, "md": markdown, "html": html}[kind](content)
            files.append((f"manual/{lang}/{kind}/part-{index:02d}.{kind}", data))
            index += 1
    return files


def pdf_readers() -> list[str]:
    """Both readers on one file of each language, each compared with the text the file was written from."""
    lines = ["| reader | lang | pages | s per page | reads the text as written |", "|---|---|---:|---:|---|"]
    for lang in ("en", "ja"):
        content = pages(lang, PAGES_PER_FILE, paragraphs(lang))
        data = pdf(lang, content)
        written = "".join("".join(text for _, _, text in content).split())
        readers = {
            "pypdf": lambda: "".join(p.extract_text() for p in PdfReader(io.BytesIO(data)).pages),  # noqa: B023
            "pdfminer.six": lambda: extract_text(io.BytesIO(data)),  # noqa: B023
        }
        for name, read in readers.items():
            started = time.perf_counter()
            text = read()
            seconds = time.perf_counter() - started
            same = "".join(text.split()) == written
            lines.append(
                f"| {name} | {lang} | {len(content)} | {seconds / len(content):.4f} | {'yes' if same else 'no'} |"
            )
    return lines


async def phases(files: list[tuple[str, bytes]], settings: Settings, embeddings: USEEmbeddings) -> list[str]:
    limits = settings.limits
    timings: dict[str, float] = {}
    started = time.perf_counter()
    documents = [d for name, data in files for d in read_file(name, data, limits)]
    timings["read files"] = time.perf_counter() - started
    chunker = Chunker(settings.chunking.size, settings.chunking.overlap)
    started = time.perf_counter()
    pieces = {d.id: chunker.split_sections(d.sections) for d in documents}
    timings["chunk"] = time.perf_counter() - started
    texts = [f"{d.title}\n{p.heading}\n{p.text}" for d in documents for p in pieces[d.id]]
    started = time.perf_counter()
    vectors = await asyncio.to_thread(embeddings.embed_documents, texts)
    timings["embed"] = time.perf_counter() - started
    with tempfile.TemporaryDirectory() as folder:
        store = await LanceVectorStore.open(Path(folder), len(vectors[0]))
        started = time.perf_counter()
        at = 0
        for document in documents:
            chunks = pieces[document.id]
            records = [
                ChunkRecord(document.id, i, document.title, p.text, vectors[at + i], {"section": p.heading})
                for i, p in enumerate(chunks)
            ]
            at += len(chunks)
            await store.replace_document("bench", document.id, records)
        timings["write to LanceDB"] = time.perf_counter() - started
        await store.close()
    total = sum(timings.values())
    lines = [f"{len(files)} files, {len(documents)} documents, {len(texts)} chunks", ""]
    lines += ["| phase | s | share | chunks/s |", "|---|---:|---:|---:|"]
    lines += [f"| {k} | {v:.1f} | {v / total:.0%} | {len(texts) / v:.0f} |" for k, v in timings.items()]
    lines.append(f"| **all** | {total:.1f} | | {len(texts) / total:.0f} |")
    return lines


async def end_to_end(files: list[tuple[str, bytes]], settings: Settings, embeddings: USEEmbeddings) -> list[str]:
    app = create_app(settings, ProviderOverrides(embeddings=embeddings))
    chunks = 0
    batch_s: list[float] = []
    async with AsyncTestClient(app, timeout=3600) as client:
        started = time.perf_counter()
        for at in range(0, len(files), BATCH):
            parts = [("files", (n, d, "application/octet-stream")) for n, d in files[at : at + BATCH]]
            sent = time.perf_counter()
            response = await client.post("/v1/files?tenant=bench", files=parts)
            batch_s.append(time.perf_counter() - sent)
            response.raise_for_status()
            chunks += sum(f["chunks"] for f in response.json()["files"])
        # Searchable, not just accepted: the store lists the last file's chunks.
        held = (await client.get("/v1/files?tenant=bench")).json()["files"]
        total = time.perf_counter() - started
    assert files[-1][0] in {f["file"] for f in held}, "the last file is not in the store"
    return [
        f"end to end through POST /v1/files: {len(files)} files, {chunks} chunks in {total:.1f} s = "
        f"{chunks / total:.0f} chunks/s; per batch of {BATCH} files median {statistics.median(batch_s):.1f} s"
    ]


async def run(total_pages: int) -> None:
    files = manual(total_pages)
    print(f"manual: {total_pages} pages in {len(files)} files, {sum(len(d) for _, d in files) / 1e6:.1f} MB\n")
    print("\n".join(pdf_readers()), end="\n\n")
    embeddings = USEEmbeddings()
    with tempfile.TemporaryDirectory() as folder:
        settings = Settings().replace(vector_store={"path": Path(folder) / "lancedb"}, redis={"url": None})
        print("\n".join(await phases(files, settings, embeddings)), end="\n\n")
        print("\n".join(await end_to_end(files, settings, embeddings)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=1000)
    args = parser.parse_args()
    asyncio.run(run(args.pages))


if __name__ == "__main__":
    main()
