"""The evaluation harness's pieces: SQuAD metrics, dataset loaders, the per-mode summary."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest

from gateway.query.steps import RouteQuery
from pipelines.shared.events import Assess, Check, Escalate, Evaluate, Generate, PlanHop, Retrieve, SearchHop
from routes.offline.eval.datasets import Question, load
from routes.offline.eval.metrics import answer_in_prediction, exact_match, f1_score, normalize_answer, passage_recall
from routes.offline.eval.report import draw_chart, summarise
from routes.offline.eval.runner import FirstRetrieval, Outcome, ask, calls_by_step, failed, first_verdict, route_of
from routes.offline.eval.tables import merged, paired, render
from routes.written_kb import load_written_kb


def test_squad_normalisation_drops_case_punctuation_articles_and_citations() -> None:
    assert normalize_answer("The  Eiffel Tower! [1]") == "eiffel tower"
    assert normalize_answer("an apple, a pear") == "apple pear"


@pytest.mark.parametrize(
    ("prediction", "answers", "em", "f1"),
    [
        ("France", ["France"], 1.0, 1.0),
        ("in France [2]", ["France"], 0.0, pytest.approx(2 / 3)),
        ("Germany", ["France"], 0.0, 0.0),
        ("10th and 11th centuries", ["in the 10th and 11th centuries", "10th and 11th centuries"], 1.0, 1.0),
        ("", ["France"], 0.0, 0.0),
    ],
)
def test_exact_match_and_f1_take_the_best_gold_answer(
    prediction: str, answers: list[str], em: float, f1: float
) -> None:
    assert exact_match(prediction, answers) == em
    assert f1_score(prediction, answers) == f1


def test_answer_in_prediction_and_passage_recall() -> None:
    assert answer_in_prediction("The Normans settled in France in 911 [1].", ["France"]) == 1.0
    assert answer_in_prediction("They settled in Italy.", ["France"]) == 0.0
    assert passage_recall(["a", "c"], frozenset({"a", "b"})) == 0.5
    assert passage_recall(["a"], frozenset()) is None


def test_hotpotqa_loader_uses_the_companion_corpus(tmp_path: Path) -> None:
    questions = [
        {
            "_id": "q1",
            "question": "Which city hosts the HQ of the maker of X?",
            "answer": "Osaka",
            "supporting_facts": [["X", 0], ["Maker", 1]],
            "context": [["X", ["X is made by Maker."]], ["Maker", ["Maker is a firm.", " Its HQ is in Osaka."]]],
        }
    ]
    (tmp_path / "mini.json").write_text(json.dumps(questions))
    (tmp_path / "mini_corpus.json").write_text(
        json.dumps({"X": ["X is made by Maker."], "Maker": ["Maker is a firm.", " Its HQ is in Osaka."], "Y": ["Y."]})
    )
    dataset = load(tmp_path / "mini.json")
    assert dataset.name == "hotpotqa"
    assert {d["id"] for d in dataset.documents} == {"X", "Maker", "Y"}
    assert dataset.questions[0].gold_doc_ids == frozenset({"X", "Maker"})
    assert dataset.questions[0].answers == ["Osaka"]


def test_squad_loader_makes_paragraph_documents_and_marks_unanswerables(tmp_path: Path) -> None:
    squad = {
        "version": "v2.0",
        "data": [
            {
                "title": "Normans",
                "paragraphs": [
                    {
                        "context": "Normandy is in France.",
                        "qas": [
                            {"id": "a", "question": "Where is Normandy?", "answers": [{"text": "France"}]},
                            {"id": "b", "question": "Where is Atlantis?", "answers": [], "is_impossible": True},
                        ],
                    }
                ],
            }
        ],
    }
    (tmp_path / "squad.json").write_text(json.dumps(squad))
    dataset = load(tmp_path / "squad.json")
    assert dataset.name == "squad"  # English: JSQuAD, the same format in Japanese, is named apart
    assert dataset.documents == [{"id": "normans-p0", "title": "Normans", "text": "Normandy is in France."}]
    answerable, impossible = dataset.questions
    assert answerable.gold_doc_ids == frozenset({"normans-p0"})
    assert answerable.answerable
    assert not impossible.answerable
    assert impossible.gold_doc_ids == frozenset()


def outcome(**changes: object) -> Outcome:
    base: dict[str, object] = {
        "question_id": "q",
        "kind": "",
        "answerable": True,
        "answer": "France",
        "exact_match": 1.0,
        "f1": 1.0,
        "answer_contained": 1.0,
        "passage_recall": 1.0,
        "abstained": False,
        "route": "single_hop",
        "classified_route": "single_hop",
        "escalated": False,
        "first_verdict": "correct",
        "gold_in_first_retrieval": True,
        "first_retrieval_recall": 1.0,
        "llm_calls": 1,
        "calls_by_step": {"generate": 1},
        "input_tokens": 100,
        "output_tokens": 10,
        "latency_ms": 1000.0,
        "stop_reason": None,
        "steps": [],
    }
    base.update(changes)
    return Outcome(**base)  # type: ignore[arg-type]


def test_summary_scores_answerable_and_unanswerable_separately(tmp_path: Path) -> None:
    outcomes = [
        outcome(),
        outcome(
            f1=0.0,
            exact_match=0.0,
            answer_contained=0.0,
            abstained=True,
            passage_recall=0.0,
            first_verdict="incorrect",
            gold_in_first_retrieval=False,
            first_retrieval_recall=0.0,
            llm_calls=3,
            latency_ms=3000.0,
        ),
        outcome(
            answerable=False,
            abstained=True,
            passage_recall=None,
            first_verdict="correct",
            gold_in_first_retrieval=None,
            first_retrieval_recall=None,
        ),
    ]
    summary = summarise(outcomes)
    assert summary["f1"] == 0.5
    assert summary["false_abstention_rate"] == 0.5
    assert summary["unanswerable_abstention_rate"] == 1.0
    assert summary["supporting_passage_recall"] == 0.5
    assert summary["evaluator_agreement"] == {
        "n": 2,
        "rate": 1.0,
        "note": "first Correct/Incorrect verdict vs whether a gold passage was in the first top-k",
    }
    assert summary["llm_calls_per_query"] == pytest.approx(5 / 3, abs=1e-4)
    # The unanswerable question has no gold, so it sits in neither retrieval slice.
    assert summary["by_first_retrieval"]["missed"]["questions"] == 1
    assert summary["by_first_retrieval"]["missed"]["f1"] == 0.0
    assert summary["by_first_retrieval"]["complete"]["questions"] == 1
    assert summary["by_first_retrieval"]["complete"]["llm_calls_per_query"] == 1.0
    chart = tmp_path / "chart.png"
    draw_chart({"plain": summary, "adaptive": summary}, "test", chart)
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_where_picks_the_slice_before_sampling_so_a_small_run_is_all_missed() -> None:
    from routes.offline.eval.datasets import Question
    from routes.offline.eval.runner import FirstRetrieval
    from routes.offline.eval.sampling import pick

    def question(n: int) -> Question:
        return Question(id=f"q{n}", text=f"question {n}", answers=["a"], gold_doc_ids=frozenset({"d"}))

    missed = [(question(n), FirstRetrieval(gold_found=n % 3 == 0, recall=0.5 if n % 3 == 0 else 0.0)) for n in range(9)]
    complete = [(question(n), FirstRetrieval(gold_found=True, recall=1.0)) for n in range(9, 12)]
    unjudged = [(question(99), FirstRetrieval(gold_found=None, recall=None))]
    pool = [*complete, *missed, *unjudged]

    sampled = pick(pool, "missed", 4, seed=13)
    assert len(sampled) == 4
    assert all(not first.complete for _, first in sampled)
    assert sampled == pick(pool, "missed", 4, seed=13)  # the same seed picks the same questions
    assert [q.id for q, _ in pick(pool, "complete", 0, seed=None)] == ["q9", "q10", "q11"]
    assert pick(pool, "all", 2, seed=None) == pool[:2]


def test_a_held_out_sample_leaves_out_every_question_earlier_samples_asked() -> None:
    from routes.offline.eval.sampling import pick, seed_and_limit, unasked

    first = FirstRetrieval(gold_found=False, recall=0.0)
    pool = [(Question(f"q{i}", "?", ["a"], frozenset()), first) for i in range(20)]
    earlier = [seed_and_limit("13:6"), seed_and_limit("29:5")]
    asked = {q.id for seed, limit in earlier for q, _ in pick(pool, "all", limit, seed)}
    fresh = unasked(pool, "all", earlier)

    assert 6 <= len(asked) <= 11
    assert {q.id for q, _ in fresh} == {q.id for q, _ in pool} - asked
    assert not {q.id for q, _ in pick(fresh, "all", 5, seed=71)} & asked
    assert unasked(pool, "all", []) == pool
    with pytest.raises(argparse.ArgumentTypeError):
        seed_and_limit("13")


def test_a_resumed_run_takes_the_outcomes_a_partial_report_holds(tmp_path: Path) -> None:
    from routes.offline.eval.report import resumed, summarised, write

    outcome = Outcome(
        question_id="q1", kind="bridge", answerable=True, answer="Paris", exact_match=1.0, f1=1.0,
        answer_contained=1.0, passage_recall=0.5, abstained=False, route="multi_hop", classified_route="multi_hop",
        escalated=False, first_verdict="correct", gold_in_first_retrieval=True, first_retrieval_recall=0.5,
        llm_calls=3, calls_by_step={"generate": 1}, input_tokens=10, output_tokens=5, latency_ms=12.5,
        stop_reason="answered", steps=["retrieve(k=8, found=8)"],
    )  # fmt: skip
    timed_out = failed(Question("q2", "?", ["a"], frozenset()), "plain", FirstRetrieval(None, None), 504, 600.0)
    report: dict[str, Any] = {"dataset": "hotpotqa"}
    summarised(report, {"plain": [timed_out], "corrective": [outcome]})
    partial = write(report, tmp_path, partial=True)

    # What the gateway failed is asked again.
    assert resumed(partial) == {("corrective", "q1"): outcome}


def test_first_verdict_is_read_from_the_first_retrieval_check_event() -> None:
    escalated = [
        RouteQuery(route="single_hop", classifier="llm"),
        Retrieve(k=4, found=4),
        Assess(verdict="incorrect"),
        Escalate(from_route="single_hop", to_route="multi_hop", reason="retrieval_incorrect"),
        Retrieve(k=5, found=5),
        Evaluate(verdict="correct", kept=1, total=5, graded=1),
    ]
    assert first_verdict(escalated) == "incorrect"
    assert first_verdict(escalated[3:]) == "correct"
    assert first_verdict([Retrieve(k=4, found=0)]) is None


async def test_ask_scores_an_answer_from_the_typed_response(client: Any) -> None:
    documents = [{"id": "normans", "title": "Normans", "text": "The Normans settled in Normandy, France."}]
    (await client.post("/v1/documents", json={"tenant": "eval", "documents": documents})).raise_for_status()
    question = Question(
        id="q", text="Where did the Normans settle?", answers=["Normandy"], gold_doc_ids=frozenset({"normans"})
    )
    result = await ask(client, "eval", question, "plain", FirstRetrieval(gold_found=True, recall=1.0))
    assert result.route == "single_hop"
    assert result.first_verdict == "correct"  # from the assess event, not from the text of the steps
    assert result.passage_recall == 1.0
    assert not result.escalated


def test_jsquad_is_loaded_as_squad_under_its_own_name(tmp_path: Path) -> None:
    jsquad = {
        "data": [
            {
                "title": "梅雨",
                "paragraphs": [
                    {
                        "context": "梅雨は6月から7月にかけての雨の季節である。",
                        "qas": [{"id": "j1", "question": "梅雨はいつ？", "answers": [{"text": "6月から7月"}]}],
                    }
                ],
            }
        ]
    }
    (tmp_path / "jsquad.json").write_text(json.dumps(jsquad, ensure_ascii=False), encoding="utf-8")
    dataset = load(tmp_path / "jsquad.json")
    assert dataset.name == "jsquad"
    assert dataset.questions[0].answers == ["6月から7月"]


def test_the_written_kb_is_a_dataset_whose_kinds_carry_the_language() -> None:
    dataset = load(Path(__file__).parents[2] / "routes" / "data" / "written_kb.json")
    kb = load_written_kb()
    assert dataset.name == "written"
    assert len(dataset.documents) == len(kb.documents)
    assert {d["id"] for d in dataset.documents} == {d.id for d in kb.documents}
    by_id = {q.id: q for q in dataset.questions}
    for question in kb.questions:
        loaded = by_id[question.id]
        assert (loaded.text, loaded.answers) == (question.question, [question.answer])
        assert loaded.gold_doc_ids == frozenset(question.supporting)
        assert loaded.kind == f"{question.kind}-{question.lang}"


@pytest.mark.parametrize("lang", ["en", "ja"])
def test_a_near_miss_manual_is_a_dataset_whose_gold_is_the_answering_page(lang: str) -> None:
    path = Path(__file__).parents[2] / "routes" / "data" / f"near_miss_{lang}.json"
    raw = json.loads(path.read_text(encoding="utf-8"))
    dataset = load(path)
    assert dataset.name == "near_miss"
    assert {d["id"] for d in dataset.documents} == {d["id"] for d in raw["documents"]}
    by_id = {q.id: q for q in dataset.questions}
    assert len(by_id) == len(raw["cases"]) >= 60
    for case in raw["cases"]:
        loaded = by_id[case["id"]]
        assert (loaded.text, loaded.answers) == (case["question"], [case["answer"]])
        assert loaded.gold_doc_ids == frozenset([case["answer_doc"]])
        assert loaded.kind == f"{case['kind']}-{lang}"


def test_cost_has_the_median_and_latency_in_every_slice_and_per_chosen_route() -> None:
    outcomes = [
        outcome(llm_calls=1, latency_ms=1000.0),
        outcome(llm_calls=2, latency_ms=2000.0),
        outcome(
            llm_calls=9,
            latency_ms=9000.0,
            classified_route="multi_hop",
            route="multi_hop",
            first_retrieval_recall=0.5,
            abstained=True,
        ),
        outcome(llm_calls=3, latency_ms=3000.0, route="multi_hop", escalated=True, first_retrieval_recall=0.0),
    ]
    summary = summarise(outcomes)
    assert summary["llm_calls_per_query"] == 3.75
    assert summary["llm_calls_median"] == 2.5  # one question looping to the budget moves the mean, not this
    assert summary["abstention_rate"] == 0.25
    missed = summary["by_first_retrieval"]["missed"]
    assert (missed["questions"], missed["llm_calls_median"], missed["latency_ms_p50"]) == (2, 6.0, 6000.0)
    assert summary["by_first_retrieval"]["complete"]["latency_ms_p95"] == pytest.approx(1950.0)
    # Per route chosen by the router: the escalated question counts where it was sent first.
    assert set(summary["by_route"]) == {"single_hop", "multi_hop"}
    single = summary["by_route"]["single_hop"]
    assert (single["questions"], single["escalated"], single["llm_calls_median"]) == (3, 1, 2.0)
    assert summary["by_route"]["multi_hop"]["abstention_rate"] == 1.0
    assert summary["calls_by_step"] == {"generate": 1.0}


def test_calls_are_attributed_to_the_steps_their_events_name() -> None:
    events = [
        Retrieve(k=8, found=8),
        Evaluate(verdict="ambiguous", kept=2, total=8, graded=2),
        PlanHop(hop=1, query="Where was Nolan born?"),
        SearchHop(hop=1, k=8, new=8),
        Evaluate(verdict="correct", kept=1, total=8, graded=1),
        PlanHop(hop=2, done=True),
        Generate(),
        Check(critic="grounded", outcome="failed"),
        Generate(mode="regenerate"),
        Check(critic="grounded", outcome="passed"),
        Generate(mode="keep_best"),
    ]
    # 2 + 1 graded, 2 plans, 2 generations: the 2 calls left went to the critics.
    assert calls_by_step(events, 9) == {"grade": 3, "plan_hop": 2, "rewrite": 0, "generate": 2, "critics": 2}
    # Plain RAG's draft is a generation; taking it again and keeping it are not calls.
    floor = [Generate(mode="plain"), PlanHop(hop=1, done=True), Generate(mode="reuse_plain")]
    floor.append(Generate(mode="keep_plain"))
    assert calls_by_step(floor, 2) == {"grade": 0, "plan_hop": 1, "rewrite": 0, "generate": 1, "critics": 0}


def test_tables_compare_runs_only_on_the_same_questions() -> None:
    def report(mode: str, ids: list[str]) -> dict[str, Any]:
        outcomes = [outcome(question_id=i) for i in ids]
        return {"summary": {mode: summarise(outcomes)}, "outcomes": {mode: [o.as_dict() for o in outcomes]}}

    summaries = merged([report("plain", ["a", "b"]), report("corrective", ["a", "b"])])
    assert list(summaries) == ["plain", "corrective"]
    text = render(summaries)
    assert "| `single_hop` (plain RAG) | 2 | 1.000 | 1.000 | 1.000 | 0.000 | 1.00 / 1.0 | 1.0 s | 1.0 s |" in text
    assert "| `multi_hop` | complete | 2 |" in text
    with pytest.raises(ValueError, match="different questions"):
        merged([report("plain", ["a", "b"]), report("corrective", ["a", "c"])])
    with pytest.raises(ValueError, match="two reports hold the mode 'plain'"):
        merged([report("plain", ["a", "b"]), report("plain", ["a", "b"])])  # one would hide the other


def test_a_question_the_gateway_failed_counts_as_unanswered_in_its_mode() -> None:
    question = Question(id="q", text="Where?", answers=["Osaka"], gold_doc_ids=frozenset({"d"}))
    lost = failed(question, "corrective", FirstRetrieval(gold_found=True, recall=1.0), 504, 90.0)
    assert (lost.route, lost.answer_contained, lost.passage_recall, lost.latency_ms) == ("multi_hop", 0.0, 0.0, 90000.0)
    summary = summarise([outcome(), lost])
    assert summary["answer_contained"] == 0.5
    assert summary["stop_reasons"] == {"-": 1, "http_504": 1}


async def test_route_of_asks_the_router_alone(client: Any) -> None:
    documents = [{"id": "normans", "title": "Normans", "text": "The Normans settled in Normandy, France, in 911."}]
    (await client.post("/v1/documents", json={"tenant": "eval-route", "documents": documents})).raise_for_status()
    question = Question(id="q", text="Where did the Normans settle?", answers=["Normandy"], gold_doc_ids=frozenset())
    assert await route_of(client, "eval-route", question) in {"direct", "single_hop", "multi_hop"}
    # An empty knowledge base holds nothing on any question: the router answers it directly.
    assert await route_of(client, "eval-empty", question) == "direct"


def test_a_partial_report_is_written_beside_the_final_one(tmp_path: Path) -> None:
    from routes.offline.eval.report import summarised, write

    report: dict[str, Any] = {"dataset": "hotpotqa"}
    summarised(report, {"plain": [outcome()], "corrective": [outcome(llm_calls=4)]})
    partial = write(report, tmp_path / "out", partial=True)
    assert partial.name == "hotpotqa-plain-corrective-partial.json"
    saved = json.loads(partial.read_text())
    assert saved["summary"]["corrective"]["llm_calls_median"] == 4.0
    assert write(report, tmp_path / "out").name == "hotpotqa-plain-corrective-report.json"


def _answered(question_id: str, contained: float, calls: int, steps: list[str]) -> dict[str, Any]:
    return {
        "question_id": question_id,
        "answer_contained": contained,
        "f1": contained / 2,
        "llm_calls": calls,
        "steps": steps,
    }


def test_paired_sets_each_mode_against_plain_on_the_questions_both_answered() -> None:
    outcomes = {
        "plain": [_answered("q1", 1.0, 1, []), _answered("q2", 0.0, 1, []), _answered("q3", 1.0, 1, [])],
        "corrective": [
            _answered("q1", 1.0, 3, ["answer_plainly", "keep_plain_answer"]),
            _answered("q2", 1.0, 5, ["answer_plainly", "generate_answer"]),
            _answered("q3", 0.0, 4, ["answer_plainly", "reuse_plain_answer"]),
        ],
        "adaptive": [_answered("q1", 1.0, 1, [])],  # cut short: compared on q1 alone
    }
    lines = paired(outcomes).splitlines()
    assert lines[0] == "Against plain, on the same questions"
    multi_hop = [cell.strip() for cell in lines[4].strip("|").split("|")]
    assert multi_hop == ["`multi_hop`", "3", "0.667 / 0.333", "0.667 / 0.333", "4.00 / 4.0", "1 / 1", "1 / 1"]
    auto = [cell.strip() for cell in lines[5].strip("|").split("|")]
    assert auto[:2] == ["`auto`", "1"]
    assert auto[5] == "0 / 0"
    assert paired({"corrective": outcomes["corrective"]}) == ""
