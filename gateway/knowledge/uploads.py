"""Files in: each uploaded file read into documents, the readable ones indexed together as one change.

Every file is read before anything is written, so a bad file is refused whole (nothing of it indexed) and never
stops the others; the readable files' documents then go in as one knowledge change, so the tenant's knowledge
version moves once per upload, not once per file. Reading runs in a worker thread, one file at a time: parsing a
large PDF is CPU-bound and must not stall the event loop, and one file at a time bounds the memory a batch holds.
"""

from __future__ import annotations

import asyncio
import json
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from gateway.errors import ClientError
from gateway.knowledge.files.formats import read_file
from gateway.knowledge.files.sections import FileRejectedError, ParsedDocument
from gateway.knowledge.permissions import wire_access
from gateway.knowledge.schemas import FileOutcome, FilesResponse, IndexedFile
from gateway.knowledge.service import KnowledgeBase, NewDocument
from gateway.knowledge.validation import check_limits
from gateway.settings import RequestLimits
from pipelines.shared import UNSET


@dataclass(frozen=True, slots=True)
class Upload:
    name: str  # the file's path as sent: its documents' id
    data: bytes


def _checked(documents: list[ParsedDocument], taken: set[str], limits: RequestLimits) -> list[ParsedDocument]:
    """The documents a readable file adds, once they meet the limits every knowledge write obeys."""
    try:
        check_limits({d.id: sum(len(s.text) for s in d.sections) for d in documents}, limits)
    except ClientError as refused:
        raise FileRejectedError(refused.detail) from refused
    for document in documents:
        if document.id in taken:
            raise FileRejectedError(f"document {document.id!r} comes from another file of this upload too")
    return documents


async def ingest_files(
    knowledge: KnowledgeBase,
    tenant: str,
    uploads: Sequence[Upload],
    limits: RequestLimits,
    *,
    access: tuple[str, ...] = (UNSET,),
) -> FilesResponse:
    """``access``: every document's access tags (``gateway.knowledge.permissions``), the upload's form field."""
    outcomes: list[FileOutcome] = []
    accepted: list[tuple[int, list[ParsedDocument]]] = []
    taken: set[str] = set()
    for upload in uploads:
        try:
            documents = _checked(await asyncio.to_thread(read_file, upload.name, upload.data, limits), taken, limits)
        except FileRejectedError as refused:
            outcomes.append(FileOutcome(file=upload.name, status=refused.status, reason=refused.reason))
            continue
        taken.update(d.id for d in documents)
        accepted.append((len(outcomes), documents))
        outcomes.append(FileOutcome(file=upload.name, status=200, documents=[d.id for d in documents]))
    if accepted:
        new = [
            NewDocument(id=d.id, text="", title=d.title, metadata=d.metadata, sections=tuple(d.sections), access=access)
            for _, documents in accepted
            for d in documents
        ]
        result = await knowledge.ingest(tenant, new)
        for at, documents in accepted:
            outcome = outcomes[at]
            outcome.chunks = sum(result.chunks_by_document[d.id] for d in documents)
            outcome.sections = sum(len(d.sections) for d in documents)
    return FilesResponse(
        tenant=tenant,
        indexed=len(accepted),
        rejected=len(outcomes) - len(accepted),
        knowledge_version=await knowledge.version(tenant),
        files=outcomes,
    )


async def indexed_files(knowledge: KnowledgeBase, tenant: str) -> list[IndexedFile]:
    """The files a tenant's documents came from, with their content hashes: what a folder sync skips or deletes."""
    stored = await knowledge.store.export_chunks(tenant)
    if stored is None:
        return []
    by_file: dict[tuple[str, str], set[str]] = defaultdict(set)
    access: dict[tuple[str, str], tuple[str, ...]] = {}
    parsed: dict[str, dict[str, object]] = {}
    tags = stored.access if len(stored.access) == len(stored) else [(UNSET,)] * len(stored)
    for doc_id, text, held in zip(stored.doc_ids, stored.metadata, tags, strict=True):
        metadata = parsed.setdefault(text, json.loads(text or "{}"))
        source, digest = metadata.get("source"), metadata.get("sha256")
        if isinstance(source, str) and isinstance(digest, str):
            by_file[(source, digest)].add(doc_id)
            access.setdefault((source, digest), tuple(held))
    return [
        IndexedFile(file=f, sha256=h, documents=sorted(ids), access=wire_access(access[(f, h)]))
        for (f, h), ids in sorted(by_file.items())
    ]
