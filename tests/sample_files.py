"""Files of every supported type, English and Japanese, built in memory: what a team's folder holds.

Each carries a fact under a heading two levels deep, so a test can ask for the fact and look for the heading path
in the evidence. PDFs are written by reportlab (BSD) with its built-in Japanese CID fonts (not embedded: the case
of most Japanese office PDFs), Word files by python-docx.
"""

from __future__ import annotations

import io
import json
import zipfile
from dataclasses import dataclass

import docx
from reportlab.pdfbase import pdfmetrics
from reportlab.pdfbase.cidfonts import UnicodeCIDFont
from reportlab.pdfgen import canvas


@dataclass(frozen=True, slots=True)
class Fact:
    lang: str
    title: str
    chapter: str
    section: str
    text: str
    question: str
    answer: str


FACTS = {
    "en": Fact(
        "en",
        "Halvorsen Billing Handbook",
        "Billing",
        "Failed payments",
        "When a card payment fails, Halvorsen retries the charge automatically after four days. "
        "After the third failed retry the account is suspended and the owner receives an email.",
        "After how many days does Halvorsen retry a failed card payment?",
        "four",
    ),
    "ja": Fact(
        "ja",
        "ハルヴォルセン請求ガイド",
        "請求",
        "支払いの失敗",
        "カードの支払いが失敗した場合、ハルヴォルセンは五日後に自動で再請求します。"
        "三回目の再請求にも失敗するとアカウントは停止され、所有者にメールが送られます。",
        "カードの支払いが失敗した場合、ハルヴォルセンは何日後に再請求しますか？",
        "五日後",
    ),
}
OTHER = {
    "en": ("Support", "Opening hours", "The support desk answers tickets from 9:00 to 17:00 on weekdays."),
    "ja": ("サポート", "受付時間", "サポート窓口は平日の9時から17時まで問い合わせに対応します。"),
}


def markdown(fact: Fact) -> bytes:
    chapter, section, text = OTHER[fact.lang]
    return (
        f"# {fact.title}\n\n## {fact.chapter}\n\n### {fact.section}\n\n{fact.text}\n\n"
        f"| plan | price |\n|---|---|\n| basic | 10 |\n\n## {chapter}\n\n### {section}\n\n{text}\n"
    ).encode()


def html(fact: Fact) -> bytes:
    chapter, section, text = OTHER[fact.lang]
    return (
        f"<html><head><title>{fact.title}</title><script>document.title = 'run'</script></head><body>"
        f"<h1>{fact.title}</h1><h2>{fact.chapter}</h2><h3>{fact.section}</h3><p>{fact.text}</p>"
        f"<h2>{chapter}</h2><h3>{section}</h3><p>{text}</p></body></html>"
    ).encode()


def text(fact: Fact, encoding: str = "utf-8") -> bytes:
    return f"{fact.title}\n\n{fact.text}\n".encode(encoding)


def jsonl(fact: Fact) -> bytes:
    chapter, _, text = OTHER[fact.lang]
    lines = [
        {"id": f"{fact.lang}-billing", "title": fact.title, "text": fact.text},
        {"id": f"{fact.lang}-support", "title": chapter, "text": text},
    ]
    return "\n".join(json.dumps(line, ensure_ascii=False) for line in lines).encode()


def pdf(fact: Fact) -> bytes:
    """Two pages with an outline (chapter › section on page 1), text set in a CID font for Japanese."""
    font = "Helvetica"
    if fact.lang == "ja":
        font = "HeiseiKakuGo-W5"
        pdfmetrics.registerFont(UnicodeCIDFont(font))
    buffer = io.BytesIO()
    page = canvas.Canvas(buffer)
    page.setTitle(fact.title)
    page.bookmarkPage("chapter-1")
    page.bookmarkPage("section-1")  # one key per outline entry: an entry's title belongs to its key
    page.addOutlineEntry(fact.chapter, "chapter-1", level=0)
    page.addOutlineEntry(fact.section, "section-1", level=1)
    page.setFont(font, 11)
    y = 800
    for line in _lines(fact.text, 40 if fact.lang == "ja" else 80):
        page.drawString(40, y, line)
        y -= 16
    page.showPage()
    chapter, section, text = OTHER[fact.lang]
    page.bookmarkPage("chapter-2")
    page.bookmarkPage("section-2")
    page.addOutlineEntry(chapter, "chapter-2", level=0)
    page.addOutlineEntry(section, "section-2", level=1)
    page.setFont(font, 11)
    page.drawString(40, 800, text)
    page.showPage()
    page.save()
    return buffer.getvalue()


def _lines(text: str, width: int) -> list[str]:
    if " " not in text:
        return [text[i : i + width] for i in range(0, len(text), width)]
    lines, current = [], ""
    for word in text.split():
        if current and len(current) + len(word) + 1 > width:
            lines.append(current)
            current = word
        else:
            current = f"{current} {word}".strip()
    return [*lines, current]


def word(fact: Fact) -> bytes:
    document = docx.Document()
    document.core_properties.title = fact.title
    document.add_heading(fact.chapter, level=1)
    document.add_heading(fact.section, level=2)
    document.add_paragraph(fact.text)
    table = document.add_table(rows=2, cols=2)
    for row, cells in zip(table.rows, [("plan", "price"), ("basic", "10")], strict=True):
        row.cells[0].text, row.cells[1].text = cells
    chapter, section, text = OTHER[fact.lang]
    document.add_heading(chapter, level=1)
    document.add_heading(section, level=2)
    document.add_paragraph(text)
    buffer = io.BytesIO()
    document.save(buffer)
    return buffer.getvalue()


def with_part(docx_bytes: bytes, name: str, content: bytes) -> bytes:
    """``docx_bytes`` with one zip part replaced (or added): to build a malicious Word file from a good one."""
    source = zipfile.ZipFile(io.BytesIO(docx_bytes))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as target:
        for item in source.infolist():
            if item.filename != name:
                target.writestr(item, source.read(item.filename))
        target.writestr(name, content)
    return out.getvalue()


BUILDERS = {"md": markdown, "html": html, "txt": text, "pdf": pdf, "docx": word, "jsonl": jsonl}


def sample(kind: str, lang: str) -> tuple[str, bytes]:
    """A file name (its path in a folder) and its bytes."""
    return f"{lang}/handbook.{kind}", BUILDERS[kind](FACTS[lang])
