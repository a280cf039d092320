"""Integrity of the written multi-hop knowledge base (routes/data/written_kb.json)."""

from __future__ import annotations

import re
from collections import Counter

import pytest

from routes.written_kb import WrittenKB, load_written_kb

_JAPANESE = re.compile(r"[\u3040-\u30ff\u4e00-\u9fff]")


@pytest.fixture(scope="module")
def kb() -> WrittenKB:
    return load_written_kb()


def test_ids_are_unique(kb: WrittenKB) -> None:
    doc_ids = [d.id for d in kb.documents]
    question_ids = [q.id for q in kb.questions]
    assert len(doc_ids) == len(set(doc_ids))
    assert len(question_ids) == len(set(question_ids))


def test_every_supporting_document_exists_and_shares_the_question_language(kb: WrittenKB) -> None:
    for question in kb.questions:
        for doc_id in question.supporting:
            assert kb.document(doc_id).lang == question.lang, question.id


def test_multi_hop_questions_cite_at_least_two_distinct_documents(kb: WrittenKB) -> None:
    for question in kb.questions:
        distinct = len(set(question.supporting))
        assert distinct == len(question.supporting), question.id
        if question.route == "multi_hop":
            assert question.kind in {"bridge", "comparison"}, question.id
            assert distinct >= 2, question.id
        else:
            assert question.kind == "single", question.id
            assert distinct == 1, question.id


def test_sizes_and_language_balance(kb: WrittenKB) -> None:
    counts = Counter((q.route, q.lang) for q in kb.questions)
    assert counts[("multi_hop", "en")] >= 35
    assert counts[("multi_hop", "ja")] >= 35
    assert counts[("multi_hop", "en")] + counts[("multi_hop", "ja")] >= 80
    assert counts[("single_hop", "en")] + counts[("single_hop", "ja")] >= 40
    assert min(counts[("single_hop", "en")], counts[("single_hop", "ja")]) >= 15
    kinds = Counter(q.kind for q in kb.questions if q.route == "multi_hop")
    assert kinds["bridge"] >= 20
    assert kinds["comparison"] >= 20


def test_every_document_is_used_and_text_matches_its_language(kb: WrittenKB) -> None:
    used = {doc_id for q in kb.questions for doc_id in q.supporting}
    assert used == {d.id for d in kb.documents}
    for doc in kb.documents:
        japanese = bool(_JAPANESE.search(doc.text))
        assert japanese == (doc.lang == "ja"), doc.id
        size = len(re.sub(r"\s", "", doc.text)) if doc.lang == "ja" else len(doc.text.split())
        assert (150 <= size <= 400) if doc.lang == "ja" else (60 <= size <= 200), (doc.id, size)
    for question in kb.questions:
        assert bool(_JAPANESE.search(question.question)) == (question.lang == "ja"), question.id
        assert question.answer.strip(), question.id


def test_unknown_document_id_is_an_error(kb: WrittenKB) -> None:
    with pytest.raises(KeyError):
        kb.document("no-such-document")
