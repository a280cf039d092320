"""What the console reads of a tenant's knowledge base, and how it draws an answer.

Documents and chunks come from the store's listing of a tenant (``export_chunks``), the same listing the
in-memory search and the folder sync read; a store that cannot list a tenant cheaply (Pinecone) says so and the
knowledge page shows only what an upload reports. Every listing is of what the reader may see: a chunk whose access
tags (the listing's ``access`` column) the reader's ``Visibility`` does not allow is left out before anything is
counted, matched or shown, so a document the reader may not read is, to them, a document that is not there. The
answer's ``[n]`` markers become links to the numbered passages, everything else of the answer escaped.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict

from markupsafe import Markup, escape

from gateway.access import Reader
from gateway.console.schemas import Bar, ChunkView, DocumentRow, ReaderView
from gateway.knowledge import KnowledgeBase
from gateway.providers import StoredChunks, common_access
from gateway.query import Passage, QueryResponse, step_text
from pipelines.shared import TENANT_OPEN, UNSET, Visibility

_CITATION = re.compile(r"\[(\d{1,3}(?:\s*,\s*\d{1,3})*)\]")


class Catalogue:
    """A tenant's documents and chunks as one reader may see them, read from the store on each page view (nothing
    is kept between views)."""

    def __init__(self, knowledge: KnowledgeBase) -> None:
        self._knowledge = knowledge

    async def documents(self, tenant: str, visibility: Visibility, search: str = "") -> list[DocumentRow] | None:
        """The tenant's documents ``visibility`` allows, matched case-insensitively on id, title or text when
        ``search`` is given; None when the store cannot list them."""
        stored = await self._knowledge.store.export_chunks(tenant)
        if stored is None:
            return None
        needle = search.strip().casefold()
        chunks: dict[str, int] = defaultdict(int)
        sections: dict[str, list[str]] = defaultdict(list)
        titles: dict[str, str] = {}
        sources: dict[str, str] = {}
        access: dict[str, list[tuple[str, ...]]] = defaultdict(list)
        matched: set[str] = set()
        for i in _visible(stored, visibility):
            doc_id, title, text = stored.doc_ids[i], stored.titles[i], stored.texts[i]
            meta = _metadata(stored.metadata[i])
            chunks[doc_id] += 1
            titles.setdefault(doc_id, title)
            sources.setdefault(doc_id, str(meta.get("source", "")))
            access[doc_id].append(_tags(stored, i))
            section = str(meta.get("section", ""))
            if section and section not in sections[doc_id]:
                sections[doc_id].append(section)
            if not needle or needle in doc_id.casefold() or needle in title.casefold() or needle in text.casefold():
                matched.add(doc_id)
        return [
            DocumentRow(
                id=d,
                title=titles[d],
                source=sources[d],
                chunks=chunks[d],
                sections=sections[d],
                # What every visible chunk allows: during a re-tag a document's chunks may briefly differ.
                access=_access_labels(tuple(sorted(common_access(access[d])))),
            )
            for d in sorted(matched)
        ]

    async def chunks(self, tenant: str, doc_id: str, visibility: Visibility) -> list[ChunkView] | None:
        """The document's chunks ``visibility`` allows, in order; [] when it is not there or none may be seen (the
        same answer: a reader cannot tell one from the other), None when the store cannot list them."""
        stored = await self._knowledge.store.export_chunks(tenant)
        if stored is None:
            return None
        found = [
            ChunkView(
                index=_index(stored.chunk_ids[i]),
                chunk_id=stored.chunk_ids[i],
                section=str(_metadata(stored.metadata[i]).get("section", "")),
                text=stored.texts[i],
            )
            for i in _visible(stored, visibility)
            if stored.doc_ids[i] == doc_id
        ]
        return sorted(found, key=lambda c: c.index)


def reader_view(reader: Reader) -> ReaderView:
    """Whom the console reads for, as its pages say it."""
    if reader.visibility.unrestricted:
        return ReaderView(kind="everything", user_id=None, groups=[])
    if reader.user_id is None:
        return ReaderView(kind="tenant", user_id=None, groups=[])
    return ReaderView(kind="user", user_id=reader.user_id, groups=sorted(reader.groups))


def _visible(stored: StoredChunks, visibility: Visibility) -> list[int]:
    """The rows of the listing ``visibility`` allows."""
    if visibility.unrestricted:
        return list(range(len(stored)))
    return [i for i in range(len(stored)) if visibility.allows(_tags(stored, i))]


def _tags(stored: StoredChunks, i: int) -> tuple[str, ...]:
    """Row ``i``'s access tags; ``UNSET`` where the store keeps none (a table from before document permissions),
    as the stores' own searches read such rows."""
    if len(stored.access) != len(stored):
        return (UNSET,)
    return stored.access[i] or (UNSET,)


def _access_labels(tags: tuple[str, ...]) -> list[str]:
    """The access tags as the upload form names them: ``tenant`` for the tenant-open tag, ``default`` for none."""
    labels = {TENANT_OPEN: "tenant", UNSET: "default"}
    return sorted(labels.get(tag, tag) for tag in tags)


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
