"""Open questions grouped by the similarity of their embeddings (the app's model), into stable gaps."""

from __future__ import annotations

from gateway.curation.gaps import cluster
from gateway.curation.models import AnswerRecord
from gateway.providers.embeddings import USEEmbeddings
from gateway.settings import CurationSettings
from routes.calibration import Calibration

QUESTIONS = [
    "現在の本社オフィスの住所を教えてください。",
    "How do I reset my VPN password?",
    "本社オフィスは今どこにありますか？",
    "I forgot my VPN password, how can I reset it?",
    "What is the cafeteria menu on Friday?",
    "本社の受付時間は？",  # the same office, another question (cosine 0.55-0.63 to the address ones)
]


def _record(n: int, question: str, vector: list[float]) -> AnswerRecord:
    return AnswerRecord(
        id=f"r{n}",
        tenant="acme",
        trace_id=None,
        route="single_hop",
        reasons=["abstained"],
        verdicts=[],
        top_k=4,
        documents=[],
        cited=[],
        answer="",
        question=question,
        embedding=vector,
        created_at=float(n),
    )


def test_paraphrases_form_one_gap_named_after_its_first_question(
    embeddings: USEEmbeddings, calibration: Calibration
) -> None:
    vectors = embeddings.embed_documents(QUESTIONS)
    records = [_record(n, q, v) for n, (q, v) in enumerate(zip(QUESTIONS, vectors, strict=True))]
    gaps = cluster(records, threshold=CurationSettings().gap_threshold(calibration))
    assert [[r.id for r in gap.records] for gap in gaps] == [["r0", "r2"], ["r1", "r3"], ["r4"], ["r5"]]
    assert [gap.id for gap in gaps] == ["gap_r0", "gap_r1", "gap_r4", "gap_r5"]
    assert cluster(records, threshold=1.0)[0].records == [records[0]]  # nothing joins at a cosine of 1
