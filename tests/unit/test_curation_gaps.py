"""Open questions grouped by the similarity of their embeddings (the app's model), into stable gaps, within one
visibility: questions asked under different visibilities never share a gap."""

from __future__ import annotations

from dataclasses import replace

from gateway.curation.askers import Asker
from gateway.curation.gaps import cluster
from gateway.curation.models import AnswerRecord
from gateway.providers.embeddings import USEEmbeddings
from gateway.settings import CurationSettings
from pipelines.shared.visibility import Visibility
from routes.calibration import Calibration

TENANT_OPEN = Visibility.tenant_only(unset_open=True)
HR = Visibility.of({"hr"}, unset_open=True)
ENG = Visibility.of({"eng"}, unset_open=True)


def asker(user: str, view: Visibility) -> Asker:
    return Asker(user, view.key(), None if view.groups is None else tuple(sorted(view.groups)), "header")


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
    gaps = cluster(records, CurationSettings().gap_threshold(calibration), TENANT_OPEN)
    assert [[r.id for r in gap.records] for gap in gaps] == [["r0", "r2"], ["r1", "r3"], ["r4"], ["r5"]]
    assert [gap.id for gap in gaps] == ["gap_r0", "gap_r1", "gap_r4", "gap_r5"]
    assert {gap.visibility for gap in gaps} == {TENANT_OPEN}  # recorded before askers were: tenant-open
    assert cluster(records, 1.0, TENANT_OPEN)[0].records == [records[0]]  # nothing joins at a cosine of 1


def test_questions_asked_under_different_visibilities_never_share_a_gap(
    embeddings: USEEmbeddings, calibration: Calibration
) -> None:
    threshold = CurationSettings().gap_threshold(calibration)
    vectors = embeddings.embed_documents(QUESTIONS)
    hr = [
        replace(_record(n, q, v), asker=asker("hana", HR))
        for n, (q, v) in enumerate(zip(QUESTIONS, vectors, strict=True))
    ]
    # ENG asks the very same questions, each just after HR: alone they would join HR's gaps at a cosine of 1.
    eng = [replace(r, id=f"e{n}", created_at=r.created_at + 0.5, asker=asker("emil", ENG)) for n, r in enumerate(hr)]
    both = sorted([*hr, *eng], key=lambda r: r.created_at)
    gaps = cluster(both, threshold, TENANT_OPEN)
    assert all(len({r.asker.visibility_key for r in gap.records}) == 1 for gap in gaps)
    by_view = {view.key(): [[r.id for r in g.records] for g in gaps if g.visibility == view] for view in (HR, ENG)}
    assert by_view[HR.key()] == [["r0", "r2"], ["r1", "r3"], ["r4"], ["r5"]]
    assert by_view[ENG.key()] == [["e0", "e2"], ["e1", "e3"], ["e4"], ["e5"]]
    # An existing single-visibility gap keeps its id (the resolution endpoints look it up by it) whatever other
    # visibilities ask meanwhile: HR's gaps are the ones HR's questions form alone.
    alone = cluster(hr, threshold, TENANT_OPEN)
    assert [(g.id, g.records) for g in gaps if g.visibility == HR] == [(g.id, g.records) for g in alone]
    assert [g.id for g in gaps] == ["gap_r0", "gap_e0", "gap_r1", "gap_e1", "gap_r4", "gap_e4", "gap_r5", "gap_e5"]


def test_an_unknown_asker_groups_with_the_tenant_open_askers_and_another_user_of_one_view_with_its_peers(
    embeddings: USEEmbeddings, calibration: Calibration
) -> None:
    threshold = CurationSettings().gap_threshold(calibration)
    first, second = embeddings.embed_documents([QUESTIONS[0], QUESTIONS[2]])
    records = [
        _record(0, QUESTIONS[0], first),  # recorded before askers were: read as tenant-open
        replace(_record(1, QUESTIONS[2], second), asker=asker("nobody-named", TENANT_OPEN)),
        replace(_record(2, QUESTIONS[0], first), asker=asker("hana", HR)),
        replace(_record(3, QUESTIONS[2], second), asker=asker("hiro", HR)),  # another user who sees what hana sees
        replace(_record(4, QUESTIONS[0], first), asker=asker("root", Visibility.everything())),
    ]
    gaps = cluster(records, threshold, TENANT_OPEN)
    assert [(g.id, [r.id for r in g.records], g.visibility) for g in gaps] == [
        ("gap_r0", ["r0", "r1"], TENANT_OPEN),
        ("gap_r2", ["r2", "r3"], HR),
        ("gap_r4", ["r4"], Visibility.everything()),
    ]
