"""HTML (a wiki's export, a saved page) by selectolax (MIT, the Lexbor engine): text only, never run.

Scripts, styles, templates and embedded frames are dropped before any text is taken; nothing is fetched (links,
images and stylesheets stay addresses). ``h1``-``h6`` make the section path; tables are kept as rows; the other
text-bearing blocks (paragraphs, list items, definitions, quotes, preformatted text) are taken in document order,
each once, not again as part of an enclosing block.
"""

from __future__ import annotations

from selectolax.lexbor import LexborHTMLParser, LexborNode

from gateway.knowledge.files.sections import Section, SectionBuilder

_DROPPED = "script, style, noscript, template, iframe, object, embed, svg, head > *:not(title)"
_HEADINGS = {"h1", "h2", "h3", "h4", "h5", "h6"}
_BLOCKS = {"p", "li", "dt", "dd", "blockquote", "pre", "figcaption", "caption", "table", *_HEADINGS}


def _inside_block(node: LexborNode) -> bool:
    parent = node.parent
    while parent is not None:
        if parent.tag in _BLOCKS:
            return True
        parent = parent.parent
    return False


def _text(node: LexborNode) -> str:
    """Inline markup joined as written (``<b>x</b>.`` is ``x.``), runs of whitespace as one space."""
    return " ".join(node.text(separator="").split())


def _rows(table: LexborNode) -> list[list[str]]:
    return [[_text(cell) for cell in row.css("th, td")] for row in table.css("tr")]


def read_html(text: str) -> tuple[str, list[Section]]:
    """The page's ``<title>`` (else its first ``h1``) and the sections."""
    tree = LexborHTMLParser(text)
    title_node = tree.css_first("title")
    title = title_node.text(strip=True) if title_node is not None else ""
    for node in tree.css(_DROPPED):
        node.decompose()
    body = tree.body
    if body is None:
        return title, []
    sections = SectionBuilder()
    blocks = [node for node in body.css(", ".join(sorted(_BLOCKS))) if not _inside_block(node)]
    for node in blocks:
        if node.tag in _HEADINGS:
            heading = _text(node)
            title = title or (heading if node.tag == "h1" else "")
            sections.heading(int(node.tag[1]), heading)
        elif node.tag == "table":
            sections.table(_rows(node))
        else:
            sections.block(node.text() if node.tag == "pre" else _text(node))
    found = sections.finish()
    if not found:  # a page of bare divs: its text as one section
        loose = body.text(separator="\n", strip=True)
        found = [Section((), loose)] if loose else []
    return title, found
