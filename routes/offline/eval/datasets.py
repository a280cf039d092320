"""Load the shared QA formats into one shape: a corpus of documents and questions with gold."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pipelines.shared import has_cjk

DatasetName = Literal["hotpotqa", "squad", "jsquad", "written"]
# A HotpotQA document's id: its title, cut to this many characters.
TITLE_ID_CHARS = 256


@dataclass(frozen=True, slots=True)
class Question:
    id: str
    text: str
    answers: list[str]
    gold_doc_ids: frozenset[str]
    answerable: bool = True
    kind: str = ""


@dataclass(slots=True)
class Dataset:
    name: str
    documents: list[dict[str, Any]] = field(default_factory=list)
    questions: list[Question] = field(default_factory=list)


def load_hotpotqa(questions_path: Path, corpus_path: Path | None = None) -> Dataset:
    """HotpotQA questions; the corpus is the companion title -> sentences file (or each question's context)."""
    items = json.loads(questions_path.read_text(encoding="utf-8"))
    corpus_file = corpus_path or questions_path.with_name(questions_path.stem + "_corpus.json")
    if corpus_file.exists():
        corpus: dict[str, list[str]] = json.loads(corpus_file.read_text(encoding="utf-8"))
    else:
        corpus = {title: sentences for item in items for title, sentences in item["context"]}
    dataset = Dataset(name="hotpotqa")
    dataset.documents = [
        {"id": title[:TITLE_ID_CHARS], "title": title, "text": "".join(sentences).strip()}
        for title, sentences in corpus.items()
        if "".join(sentences).strip()
    ]
    for index, item in enumerate(items):
        dataset.questions.append(
            Question(
                id=str(item.get("_id", index)),
                text=item["question"],
                answers=[item["answer"]],
                gold_doc_ids=frozenset(title[:TITLE_ID_CHARS] for title, _ in item["supporting_facts"]),
                kind=item.get("type", ""),
            )
        )
    return dataset


def load_squad_v2(path: Path) -> Dataset:
    """SQuAD v2: every paragraph becomes a document; unanswerable questions have no gold."""
    raw = json.loads(path.read_text(encoding="utf-8"))
    # JSQuAD is SQuAD's format in Japanese: named apart so its reports do not overwrite SQuAD's.
    japanese = any(has_cjk(p["context"]) for article in raw["data"][:1] for p in article["paragraphs"][:1])
    dataset = Dataset(name="jsquad" if japanese else "squad")
    for article in raw["data"]:
        slug = "".join(ch if ch.isalnum() else "-" for ch in article["title"]).lower()
        for p_index, paragraph in enumerate(article["paragraphs"]):
            doc_id = f"{slug}-p{p_index}"
            dataset.documents.append({"id": doc_id, "title": article["title"], "text": paragraph["context"]})
            for qa in paragraph["qas"]:
                impossible = bool(qa.get("is_impossible"))
                dataset.questions.append(
                    Question(
                        id=qa["id"],
                        text=qa["question"],
                        answers=[a["text"] for a in qa.get("answers", [])],
                        gold_doc_ids=frozenset() if impossible else frozenset({doc_id}),
                        answerable=not impossible,
                        kind="unanswerable" if impossible else "answerable",
                    )
                )
    return dataset


def load_written(path: Path) -> Dataset:
    """The written knowledge base (routes/data/written_kb.json): fictional EN and JA documents with bridge,
    comparison and single-hop questions over them. A second multi-hop set beside HotpotQA, so a change
    measured on one is checked on questions of another style; ``kind`` is the question's kind and language
    ("bridge-ja"), for ``--kind``."""
    raw = json.loads(path.read_text(encoding="utf-8"))
    dataset = Dataset(name="written")
    dataset.documents = [{"id": d["id"], "title": d["title"], "text": d["text"]} for d in raw["documents"]]
    dataset.questions = [
        Question(
            id=q["id"],
            text=q["question"],
            answers=[q["answer"]],
            gold_doc_ids=frozenset(q["supporting"]),
            kind=f"{q['kind']}-{q['lang']}",
        )
        for q in raw["questions"]
    ]
    return dataset


def load_near_miss(path: Path) -> Dataset:
    """A written near-miss manual (routes/data/near_miss_{en,ja}.json): each case's answer sits on one page beside
    neighbouring-case pages that share most of its words; ``kind`` is the case's kind and language
    ("neighbour-en")."""
    raw = json.loads(path.read_text(encoding="utf-8"))
    dataset = Dataset(name="near_miss")
    dataset.documents = [{"id": d["id"], "title": d["title"], "text": d["text"]} for d in raw["documents"]]
    dataset.questions = [
        Question(
            id=c["id"],
            text=c["question"],
            answers=[c["answer"]],
            gold_doc_ids=frozenset([c["answer_doc"]]),
            kind=f"{c['kind']}-{c['lang']}",
        )
        for c in raw["cases"]
    ]
    return dataset


def load(path: Path) -> Dataset:
    head = json.loads(path.read_text(encoding="utf-8"))
    if isinstance(head, dict) and "documents" in head and "cases" in head:
        return load_near_miss(path)
    if isinstance(head, dict) and "data" in head:
        return load_squad_v2(path)
    if isinstance(head, dict) and "documents" in head and "questions" in head:
        return load_written(path)
    return load_hotpotqa(path)
