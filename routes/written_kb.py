"""The written knowledge base: fictional documents with single-hop and multi-hop questions over them.

HotpotQA is the only public multi-hop set in the shared data, so a router or a multi-hop pipeline
measured on it alone learns HotpotQA's style. This set is a second, independent multi-hop source,
in English and Japanese, whose documents are small enough to ingest as one tenant: bridge questions
need a fact from one document to find another, comparison questions put two entities from different
documents side by side, and single-hop questions over the same documents (with distractors that
share their words) test whether a router tells the two apart on one shared tenant.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Literal, cast

KB_FILE = "written_kb.json"

Kind = Literal["bridge", "comparison", "single"]
QuestionRoute = Literal["single_hop", "multi_hop"]


@dataclass(frozen=True, slots=True)
class Document:
    id: str
    lang: str
    title: str
    text: str


@dataclass(frozen=True, slots=True)
class Question:
    id: str
    lang: str
    route: QuestionRoute
    kind: Kind
    question: str
    answer: str
    supporting: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class WrittenKB:
    documents: tuple[Document, ...]
    questions: tuple[Question, ...]

    def document(self, doc_id: str) -> Document:
        for doc in self.documents:
            if doc.id == doc_id:
                return doc
        raise KeyError(doc_id)


def load_written_kb(path: Path | None = None) -> WrittenKB:
    """The project's written knowledge base, or another file in its format (``path``: the held-out multi-hop set
    the evaluation keeps apart from training, ``routes/offline/eval/data``)."""
    source = path if path is not None else resources.files("routes") / "data" / KB_FILE
    raw = json.loads(source.read_text(encoding="utf-8"))
    documents = tuple(Document(id=d["id"], lang=d["lang"], title=d["title"], text=d["text"]) for d in raw["documents"])
    questions = tuple(
        Question(
            id=q["id"],
            lang=q["lang"],
            route=cast(QuestionRoute, q["route"]),
            kind=cast(Kind, q["kind"]),
            question=q["question"],
            answer=q["answer"],
            supporting=tuple(q["supporting"]),
        )
        for q in raw["questions"]
    )
    return WrittenKB(documents=documents, questions=questions)
