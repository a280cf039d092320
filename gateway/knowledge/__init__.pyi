from .chunking import Chunker
from .controller import DocumentController, FileController, index_uploaded
from .factory import load_sample_kb, open_knowledge
from .files.formats import SUPPORTED
from .permissions import document_tags, form_access, parse_access_field
from .schemas import DocumentIn, FilesResponse, Tenant
from .service import DenseSearch, KnowledgeBase, LocalStoreSearch, NewDocument
from .validation import valid_documents

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
