"""What the console reads of a tenant's knowledge base, and how it draws an answer.

Documents and chunks come from the store's listing of a tenant (``export_chunks``), the same listing the
in-memory search and the folder sync read; a store that cannot list a tenant cheaply (Pinecone) says so and the
knowledge page shows only what an upload reports. The answer's ``[n]`` markers become links to the numbered
passages, everything else of the answer escaped.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict

from markupsafe import Markup, escape

from gateway.console.schemas import Bar, ChunkView, DocumentRow
from gateway.knowledge import KnowledgeBase
from gateway.query import Passage, QueryResponse, step_text

_CITATION = re.compile(r"\[(\d{1,3}(?:\s*,\s*\d{1,3})*)\]")


class Catalogue:
    """A tenant's documents and chunks, read from the store on each page view (nothing is kept between views)."""

    def __init__(self, knowledge: KnowledgeBase) -> None:
        self._knowledge = knowledge

    async def documents(self, tenant: str, search: str = "") -> list[DocumentRow] | None:
        """The tenant's documents, matched case-insensitively on id, title or text when ``search`` is given; None
        when the store cannot list them."""
        stored = await self._knowledge.store.export_chunks(tenant)
        if stored is None:
            return None
        needle = search.strip().casefold()
        chunks: dict[str, int] = defaultdict(int)
        sections: dict[str, list[str]] = defaultdict(list)
        titles: dict[str, str] = {}
        sources: dict[str, str] = {}
        matched: set[str] = set()
        for doc_id, title, text, metadata in zip(
            stored.doc_ids, stored.titles, stored.texts, stored.metadata, strict=True
        ):
            meta = _metadata(metadata)
            chunks[doc_id] += 1
            titles.setdefault(doc_id, title)
            sources.setdefault(doc_id, str(meta.get("source", "")))
            section = str(meta.get("section", ""))
            if section and section not in sections[doc_id]:
                sections[doc_id].append(section)
            if not needle or needle in doc_id.casefold() or needle in title.casefold() or needle in text.casefold():
                matched.add(doc_id)
        return [
            DocumentRow(id=d, title=titles[d], source=sources[d], chunks=chunks[d], sections=sections[d])
            for d in sorted(matched)
        ]

    async def chunks(self, tenant: str, doc_id: str) -> list[ChunkView] | None:
        """The document's chunks in order; [] when it is not there, None when the store cannot list them."""
        stored = await self._knowledge.store.export_chunks(tenant)
        if stored is None:
            return None
        found = [
            ChunkView(
                index=_index(chunk_id), chunk_id=chunk_id, section=str(_metadata(meta).get("section", "")), text=text
            )
            for chunk_id, owner, text, meta in zip(
                stored.chunk_ids, stored.doc_ids, stored.texts, stored.metadata, strict=True
            )
            if owner == doc_id
        ]
        return sorted(found, key=lambda c: c.index)


def linked_answer(answer: str, passages: list[Passage]) -> Markup:
    """The answer, escaped, with each citation ``[n]`` a link to passage ``n`` (markers of no passage stay text)."""
    known = {p.n for p in passages}
    out: list[str] = []
    last = 0
    for match in _CITATION.finditer(answer):
        out.append(str(escape(answer[last : match.start()])))
        numbers = [int(n) for n in re.findall(r"\d+", match.group(1))]
        links = [f'<a class="cite" href="#passage-{n}">{n}</a>' if n in known else str(escape(str(n))) for n in numbers]
        out.append("[" + ", ".join(links) + "]")
        last = match.end()
    out.append(str(escape(answer[last:])))
    return Markup("".join(out))


def waterfall(response: QueryResponse) -> list[Bar]:
    """The response's timeline as bars on one scale: the request's latency, or the last step's end if later
    (a cached answer's steps ran when it was first made)."""
    steps = response.timeline
    end = max([response.latency_ms, *(s.start_ms + s.ms for s in steps)], default=0.0) or 1.0
    return [
        Bar(
            name=s.name,
            start_ms=s.start_ms,
            ms=s.ms,
            left_pct=round(100 * max(s.start_ms, 0.0) / end, 2),
            width_pct=round(max(100 * s.ms / end, 0.4), 2),
            events=[step_text(response.events[i]) for i in s.events if i < len(response.events)],
        )
        for s in steps
    ]


def _metadata(text: str) -> dict[str, object]:
    try:
        value = json.loads(text or "{}")
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def _index(chunk_id: str) -> int:
    _, _, tail = chunk_id.rpartition("#")
    return int(tail) if tail.isdigit() else 0
