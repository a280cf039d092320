"""What the console's pages show and what its forms send: plain dataclasses, rendered by the templates."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from litestar.datastructures import UploadFile


@dataclass(frozen=True, slots=True)
class DocumentRow:
    """One document of a tenant's knowledge base as the knowledge page lists it."""

    id: str
    title: str
    source: str  # the file it came from ("" for documents sent as JSON)
    chunks: int
    sections: list[str]
    access: list[str]  # who may read it: group names, "tenant", or "default" (none named: the tenant's policy)


@dataclass(frozen=True, slots=True)
class ReaderView:
    """Whom the console reads for: ``everything`` (an admin naming no user), ``tenant`` (what is open to the whole
    tenant: a key naming nobody) or ``user`` (that user's groups)."""

    kind: Literal["everything", "tenant", "user"]
    user_id: str | None
    groups: list[str]


@dataclass(frozen=True, slots=True)
class ChunkView:
    """One stored chunk of a document: its place, the heading path it sits under, its text."""

    index: int
    chunk_id: str
    section: str
    text: str


@dataclass(frozen=True, slots=True)
class Bar:
    """One row of the playground's waterfall: a step's offset and length as shares of the request."""

    name: str
    start_ms: float
    ms: float
    left_pct: float
    width_pct: float
    events: list[str]


@dataclass
class SignInForm:
    key: str = ""
    tenant: str = ""
    next: str = ""
    # The user's OIDC token, for a key acting for users: the console then reads as that user.
    user_token: str = ""


@dataclass
class AskForm:
    query: str = ""
    route: str = "auto"


@dataclass
class DeleteForm:
    doc_id: str = ""


@dataclass
class UploadForm:
    """One or more files, each part's file name its path (a folder's files keep their relative paths); ``access``:
    who may read them (``tenant``, or group names separated by commas; empty: the tenant's default)."""

    files: list[UploadFile] = field(default_factory=list)
    access: str | None = None
