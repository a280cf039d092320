"""``POST /v1/documents`` (upsert by id), ``DELETE /v1/documents/{id}``, and files: ``POST /v1/files`` (multipart
upload of Markdown, text, HTML, PDF, DOCX, JSONL) and ``GET /v1/files`` (what came from which file, by hash)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import msgspec
from litestar import Controller, delete, get, post
from litestar.datastructures import UploadFile
from litestar.di import NamedDependency
from litestar.enums import RequestEncodingType
from litestar.params import Body, JSONBody, PathParameter, QueryParameter

from gateway.access import BEARER, Principal, require
from gateway.errors import ClientError, NotFoundError, problem_responses
from gateway.knowledge.permissions import parse_access_field
from gateway.knowledge.schemas import (
    DeleteResponse,
    DocumentsRequest,
    DocumentsResponse,
    FilesResponse,
    IndexedFilesResponse,
)
from gateway.knowledge.service import KnowledgeBase
from gateway.knowledge.uploads import Upload, indexed_files, ingest_files
from gateway.knowledge.validation import valid_documents
from gateway.providers import TENANT_PATTERN
from gateway.settings import RequestLimits, Settings


class DocumentController(Controller):
    path = "/v1/documents"
    tags = ["documents"]
    before_request = require("admin")  # ingestion changes what every client of the tenant is told
    security = [{BEARER: []}]

    @post(
        "/",
        status_code=200,
        summary="Upsert documents by id; long texts are chunked",
        description=(
            'A document\'s `access` (group names, or "tenant") goes on every chunk of it, and every search filters '
            "by it. An upsert that changes only a document's access re-tags its chunks without embedding them again "
            "(listed in `retagged`)."
        ),
        responses=problem_responses(
            400, 401, 403, 413, 422, 429, 502, 503, 504, described={422: "A document's access is invalid"}
        ),
    )
    async def upsert(
        self,
        data: JSONBody[DocumentsRequest],
        knowledge: NamedDependency[KnowledgeBase],
        settings: NamedDependency[Settings],
        principal: NamedDependency[Principal],
    ) -> DocumentsResponse:
        tenant = principal.tenant_for(data.tenant)
        result = await knowledge.ingest(tenant, valid_documents(data.documents, settings.limits))
        return DocumentsResponse(upserted=result.upserted, chunks=result.chunks, retagged=list(result.retagged))

    @delete(
        "/{doc_id:path}",
        status_code=200,
        summary="Delete a document and all its chunks",
        description="The id may hold slashes: a file's document is named by its path (`manuals/billing.md`).",
        responses=problem_responses(400, 401, 403, 404, 429, 502, 503, 504),
    )
    async def remove(
        self,
        # Litestar documents a ``path`` parameter as a URI; it is a document id (a file's id is its path, slashes
        # and all): said so, so clients and contract tests send ids, not URLs.
        doc_id: Annotated[
            Path,
            PathParameter(
                description="The document's id; a file's is its path (slashes allowed).",
                schema_extra={"format": "path", "minLength": 1, "maxLength": 256},
            ),
        ],
        knowledge: NamedDependency[KnowledgeBase],
        principal: NamedDependency[Principal],
        tenant: Annotated[str, QueryParameter(pattern=TENANT_PATTERN)] = "default",
    ) -> DeleteResponse:
        tenant = principal.tenant_for(tenant)
        document = str(doc_id).removeprefix("/")
        if not document or len(document) > 256:
            raise ClientError("A document id is 1 to 256 characters.")
        if not await knowledge.delete(tenant, document):
            raise NotFoundError(f"Tenant {tenant!r} has no document {document!r}.")
        return DeleteResponse(deleted=document, tenant=tenant)


@dataclass
class FileUploadForm:
    """The multipart form: one part named ``files`` per file, its file name the file's path; ``access``: who may
    read every document of the upload (``tenant``, or group names separated by commas; none: the tenant's
    default)."""

    files: list[UploadFile]
    access: str | None = None


class FilesRefusedError(ClientError):
    """No file of an upload could be indexed: the status is the files' own when they agree (one file: its own)."""

    title = "No file indexed"

    def __init__(self, response: FilesResponse) -> None:
        statuses = {f.status for f in response.files}
        self.status_code = statuses.pop() if len(statuses) == 1 else 422
        reasons = "; ".join(f"{f.file}: {f.reason}" for f in response.files)
        super().__init__(f"No file was indexed. {reasons}", files=[msgspec.to_builtins(f) for f in response.files])


async def index_uploaded(
    knowledge: KnowledgeBase,
    tenant: str,
    parts: list[UploadFile],
    limits: RequestLimits,
    access: str | None = None,
) -> FilesResponse:
    """An upload's files indexed for ``tenant`` (the API's and the console's): each file's outcome, or the refused
    files' problem when none could be indexed. ``access``: the form's field, every document's (checked first: a
    bad group name refuses the upload with nothing read)."""
    tags = parse_access_field(access, what="the upload")
    files = [f for f in parts if isinstance(f, UploadFile)]
    if not files:
        raise ClientError("No files in the upload: send them as multipart/form-data parts named 'files'.")
    uploads = [Upload(name=f.filename or "", data=await f.read()) for f in files]
    response = await ingest_files(knowledge, tenant, uploads, limits, access=tags)
    if not response.indexed:
        raise FilesRefusedError(response)
    return response


class FileController(Controller):
    path = "/v1/files"
    tags = ["documents"]
    before_request = require("admin")
    security = [{BEARER: []}]

    @post(
        "/",
        status_code=200,
        summary="Upload files (Markdown, text, HTML, PDF, DOCX, JSONL); each replaces its earlier chunks",
        description=(
            "Each part's file name is its path, the id of the document it becomes (a JSONL file's lines keep their "
            "own ids). Readable files are indexed together as one knowledge change; a file that cannot be is refused "
            "whole (413 too large, 415 unsupported type, 422 unreadable) and listed with its reason. The response is "
            "200 when any file was indexed, else the refused files' status. The optional form field `access` says "
            "who may read every document of the upload: `tenant`, or group names separated by commas (422 when a "
            "name is invalid); left out, the tenant's default."
        ),
        responses=problem_responses(
            400,
            401,
            403,
            413,
            415,
            422,
            429,
            502,
            503,
            504,
            described={
                413: "The upload is over GATEWAY_MAX_UPLOAD_BYTES, or its only files are over the per-file limits",
                415: "No file is of a supported type",
                422: (
                    "No file could be read (corrupt, encrypted, not text); each file's reason is in 'files'. Or the "
                    "'access' field names an invalid group"
                ),
            },
        ),
    )
    async def upload(
        self,
        data: Annotated[FileUploadForm, Body(media_type=RequestEncodingType.MULTI_PART)],
        knowledge: NamedDependency[KnowledgeBase],
        settings: NamedDependency[Settings],
        principal: NamedDependency[Principal],
        tenant: Annotated[str, QueryParameter(pattern=TENANT_PATTERN)] = "default",
    ) -> FilesResponse:
        return await index_uploaded(
            knowledge, principal.tenant_for(tenant), data.files, settings.limits, access=data.access
        )

    @get(
        "/",
        summary="The files a tenant's documents came from, with their content hashes",
        responses=problem_responses(400, 401, 403, 429, 502, 503),
    )
    async def listing(
        self,
        knowledge: NamedDependency[KnowledgeBase],
        principal: NamedDependency[Principal],
        tenant: Annotated[str, QueryParameter(pattern=TENANT_PATTERN)] = "default",
    ) -> IndexedFilesResponse:
        tenant = principal.tenant_for(tenant)
        return IndexedFilesResponse(tenant=tenant, files=await indexed_files(knowledge, tenant))
