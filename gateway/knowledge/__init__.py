"""The knowledge base: the documents API, chunking, embedding and search of each tenant's documents.

What other packages may use of it is named below; the rest is its own.
"""

from __future__ import annotations

from gateway.knowledge.chunking import Chunker
from gateway.knowledge.controller import DocumentController, FileController, index_uploaded
from gateway.knowledge.factory import load_sample_kb, open_knowledge
from gateway.knowledge.files.formats import SUPPORTED
from gateway.knowledge.permissions import document_tags, form_access, parse_access_field
from gateway.knowledge.schemas import DocumentIn, FilesResponse, Tenant
from gateway.knowledge.service import DenseSearch, KnowledgeBase, LocalStoreSearch, NewDocument
from gateway.knowledge.validation import valid_documents

__all__ = [
    "SUPPORTED",
    "Chunker",
    "DenseSearch",
    "DocumentController",
    "DocumentIn",
    "FileController",
    "FilesResponse",
    "KnowledgeBase",
    "LocalStoreSearch",
    "NewDocument",
    "Tenant",
    "document_tags",
    "form_access",
    "index_uploaded",
    "load_sample_kb",
    "open_knowledge",
    "parse_access_field",
    "valid_documents",
]
