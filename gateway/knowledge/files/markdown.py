"""Markdown by markdown-it-py (MIT): headings make the section path, tables are kept as rows.

Block text is taken from the source lines each top-level block spans, so lists, code and quotes keep the
markup a reader (and the model) understands; raw HTML in Markdown is kept as text, never rendered or run.
"""

from __future__ import annotations

from markdown_it import MarkdownIt
from markdown_it.token import Token

from gateway.knowledge.files.sections import Section, SectionBuilder

_PARSER = MarkdownIt("commonmark").enable("table")


def _table_rows(tokens: list[Token], start: int) -> tuple[list[list[str]], int]:
    """The rows of the table opening at ``tokens[start]``, and the index after its ``table_close``."""
    rows: list[list[str]] = []
    index = start
    while tokens[index].type != "table_close":
        token = tokens[index]
        if token.type == "tr_open":
            rows.append([])
        elif token.type == "inline" and rows:
            rows[-1].append(token.content)
        index += 1
    return rows, index + 1


def read_markdown(text: str) -> tuple[str, list[Section]]:
    """The first top-level heading (the title, if any) and the sections."""
    lines = text.splitlines()
    tokens = _PARSER.parse(text)
    sections = SectionBuilder()
    title = ""
    index = 0
    while index < len(tokens):
        token = tokens[index]
        if token.type == "heading_open":
            heading = tokens[index + 1].content
            level = int(token.tag[1:])
            if level == 1 and not title:
                title = heading
            sections.heading(level, heading)
            index += 3
        elif token.type == "table_open":
            rows, index = _table_rows(tokens, index)
            sections.table(rows)
        else:
            if token.level == 0 and token.map is not None:
                first, last = token.map
                sections.block("\n".join(lines[first:last]))
            index = _after(tokens, index)
    return title, sections.finish()


def _after(tokens: list[Token], index: int) -> int:
    """The index after the top-level block starting at ``index`` (its source lines were taken whole)."""
    if tokens[index].nesting != 1:
        return index + 1
    index += 1
    while not (tokens[index].level == 0 and tokens[index].nesting == -1):
        index += 1
    return index + 1
