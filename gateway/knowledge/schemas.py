"""Wire types of the documents API (msgspec structs, validated natively by Litestar)."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from msgspec import Meta

from gateway.providers.vectorstores.base import TENANT_PATTERN

Tenant = Annotated[str, Meta(pattern=TENANT_PATTERN, description="Tenant id: letters, digits, '_' or '-'.")]
DocumentId = Annotated[str, Meta(min_length=1, max_length=256)]


class DocumentIn(msgspec.Struct, kw_only=True):
    id: DocumentId
    text: Annotated[str, Meta(min_length=1)]
    title: Annotated[str, Meta(max_length=512)] | None = None
    metadata: dict[str, Any] | None = None


class DocumentsRequest(msgspec.Struct, kw_only=True):
    tenant: Tenant = "default"
    documents: Annotated[list[DocumentIn], Meta(min_length=1)]


class DocumentsResponse(msgspec.Struct):
    upserted: int
    chunks: int


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


class IndexedFilesResponse(msgspec.Struct, kw_only=True):
    tenant: str
    files: list[IndexedFile]
