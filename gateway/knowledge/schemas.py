"""Wire types of the documents API (msgspec structs, validated natively by Litestar)."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from msgspec import Meta

from gateway.providers import TENANT_PATTERN

Tenant = Annotated[str, Meta(pattern=TENANT_PATTERN, description="Tenant id: letters, digits, '_' or '-'.")]
DocumentId = Annotated[str, Meta(min_length=1, max_length=256)]
# Checked by ``gateway.knowledge.permissions.document_tags`` (a 422 problem naming the bad group), not by the wire
# type, whose refusal would be a bare 400.
Access = Annotated[
    list[str] | str,
    Meta(
        description=(
            'Who may read the document: a list of group names (letters, digits, "_", "-", ".", ":", "/"; not '
            'starting with "*" or "~"), or "tenant" for every reader of the tenant. Left out: the tenant\'s '
            "default for documents without access."
        )
    ),
]


class DocumentIn(msgspec.Struct, kw_only=True):
    id: DocumentId
    text: Annotated[str, Meta(min_length=1)]
    title: Annotated[str, Meta(max_length=512)] | None = None
    metadata: dict[str, Any] | None = None
    access: Access | None = None


class DocumentsRequest(msgspec.Struct, kw_only=True):
    tenant: Tenant = "default"
    documents: Annotated[list[DocumentIn], Meta(min_length=1)]


class DocumentsResponse(msgspec.Struct, kw_only=True):
    upserted: int
    chunks: int
    # The documents whose only change was their access: re-tagged without being embedded again.
    retagged: list[str] = msgspec.field(default_factory=list)


class DeleteResponse(msgspec.Struct):
    deleted: str
    tenant: str


class FileOutcome(msgspec.Struct, kw_only=True):
    """What became of one uploaded file: indexed (its documents and chunks), or refused and why."""

    file: str
    status: int  # 200 indexed; 413 too large, 415 unsupported type, 422 unreadable
    documents: list[str] = msgspec.field(default_factory=list)
    chunks: int = 0
    sections: int = 0
    reason: str | None = None


class FilesResponse(msgspec.Struct, kw_only=True):
    tenant: str
    indexed: int
    rejected: int
    knowledge_version: int | None  # the tenant's knowledge version after this upload (None without a cache)
    files: list[FileOutcome]


class IndexedFile(msgspec.Struct, kw_only=True):
    """A document that came from a file, as the folder sync compares it: by path and content hash."""

    file: str
    sha256: str
    documents: list[str]
    # Its documents' access as the documents API takes it (None: the tenant's default): a sync re-sends a file
    # whose access changed, and the gateway re-tags it without embedding it again.
    access: list[str] | str | None = None


class IndexedFilesResponse(msgspec.Struct, kw_only=True):
    tenant: str
    files: list[IndexedFile]
