"""The sentence-gate evaluation's inserts and its judge-as-support reading, on small files of the shared formats."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from routes.offline.eval.inserts import Inserts, fits
from routes.offline.eval.judged_support import JudgedSupport
from routes.offline.eval.sentence_answers import first_of_each_set
from routes.offline.eval.sentence_gate import Case, judge_scores, load_cases, relevance_table
from tests.calibration_support import use_calibration

NORMAN_1 = "The Normans settled in Normandy in the tenth century. Their duke was Rollo of the northern lands."
NORMAN_2 = "Norman knights fought at Hastings in the year 1066. The battle ended the Anglo-Saxon rule of England."
NORMAN_3 = "Norman castles were built of stone across England. Many of them still stand in the towns today."
FRENCH = "The French language spread through the Norman court quickly. Latin remained the language of the church."
JA_TEXT = "梅雨 [SEP] 梅雨は日本の初夏に訪れる長い雨の季節である。北海道には梅雨がほとんどないと言われている。"


def _squad(title: str, paragraphs: list[str], answer: str) -> dict[str, Any]:
    qas = [{"id": f"{title}-q", "question": "Who?", "answers": [{"text": answer, "answer_start": 0}]}]
    return {"title": title, "paragraphs": [{"context": p, "qas": qas} for p in paragraphs]}


@pytest.fixture
def data(tmp_path: Path) -> Path:
    squad = {"data": [_squad("Normans", [NORMAN_1, NORMAN_2, NORMAN_3], "Rollo"), _squad("French", [FRENCH], "x")]}
    (tmp_path / "squad_v2_dev_normans.json").write_text(json.dumps(squad))
    jsquad = {"data": [_squad("梅雨", [JA_TEXT], "初夏")]}
    (tmp_path / "jsquad_valid_sample.json").write_text(json.dumps(jsquad, ensure_ascii=False))
    hotpot = [
        {
            "_id": "h1",
            "question": "Which river flows through the capital of the country where the castle stands?",
            "answer": "Vltava",
            "type": "bridge",
            "supporting_facts": [["Castle", 0], ["Prague", 0]],
            "context": [
                ["Castle", ["The castle stands in Bohemia near the border. "]],
                ["Prague", ["Prague lies on the Vltava river in Bohemia. "]],
                ["Brno", ["Brno is the second city of the country by population. "]],
            ],
        }
    ]
    (tmp_path / "hotpotqa_train.json").write_text(json.dumps(hotpot))
    return tmp_path


def _record(data_set: str, question_id: str, passages: list[tuple[str, str]], answers: list[str]) -> dict[str, Any]:
    return {
        "id": question_id,
        "set": data_set,
        "question": "Who?",
        "answers": answers,
        "passages": [{"id": i, "title": i, "text": ""} for i, _ in passages],
    }


def test_near_inserts_come_from_the_same_article_and_never_hold_the_answer(data: Path) -> None:
    near = Inserts(data).near(_record("squad", "normans-q", [("normans-p0", "")], ["1066"]))
    # Beside normans-p0: the article's other paragraphs, less the sentence holding the gold "1066"; not "French".
    assert near == [
        "The battle ended the Anglo-Saxon rule of England.",
        "Norman castles were built of stone across England.",
        "Many of them still stand in the towns today.",
    ]


def test_near_inserts_of_hotpotqa_come_from_the_questions_own_context(data: Path) -> None:
    near = Inserts(data).near(_record("hotpotqa", "h1", [("Castle", ""), ("Prague", "")], ["Vltava"]))
    assert near == ["Brno is the second city of the country by population."]


def test_unrelated_inserts_are_sorted_by_language_and_read_like_answer_sentences(data: Path) -> None:
    pools = Inserts(data).unrelated()
    assert ("梅雨", "梅雨は日本の初夏に訪れる長い雨の季節である。") in pools["ja"]
    assert all(fits(sentence) and not any("\u3040" <= c <= "\u9fff" for c in sentence) for _, sentence in pools["en"])
    assert not fits("Too short.")
    assert not fits("No full stop at the end of these words")


def _keyword_embed(texts: list[str]) -> np.ndarray:
    """A vector per text from a few words it holds: texts sharing those words point alike."""
    vocabulary = ("rollo", "duke", "hastings", "1066", "castle", "stone", "pope")
    rows = [[float(word in text.lower()) for word in vocabulary] + [0.1] for text in texts]
    return np.asarray(rows, dtype=np.float32)


def _case(answer: str, near: str | None) -> Case:
    return Case(
        id="q",
        lang="en",
        question="Who was the duke of the Normans?",
        passages=[NORMAN_1, NORMAN_2, NORMAN_3],
        answer=answer,
        gold=["Rollo"],
        insert="The pope crowned a king in Rome in the year 800. [2]",
        at=1,
        titles=["Normans", "Normans", "Normans"],
        near=near,
    )


def test_the_judge_scores_a_grounded_sentence_above_an_unrelated_one() -> None:
    support = JudgedSupport(_keyword_embed, use_calibration().judge)
    grounded = support.score("Their duke was Rollo of the northern lands.", ["Normans"] * 2, [NORMAN_1, NORMAN_2])
    invented = support.score("The pope crowned a king in Rome.", ["Normans"] * 2, [NORMAN_1, NORMAN_2])
    assert grounded > invented


def test_judge_scores_read_each_sentence_the_gate_cut_with_both_tests_verdicts() -> None:
    support = JudgedSupport(_keyword_embed, use_calibration().judge)
    case = _case("The duke of the Normans was Rollo [1]. The pope crowned a king in Rome in the year 800 [2].", None)
    scored = judge_scores(case, case.answer, 0.5, support)
    assert [text for text, _ in scored] == [
        "The duke of the Normans was Rollo [1].",
        "The pope crowned a king in Rome in the year 800 [2].",
    ]
    (_, first), (_, second) = scored
    assert not first.lexical
    assert second.lexical
    assert first.support > second.support
    assert not first.other
    assert not second.other


def test_relevance_table_counts_the_inserts_each_test_catches() -> None:
    support = JudgedSupport(_keyword_embed, use_calibration().judge)
    cases = [
        _case("The duke of the Normans was Rollo [1].", "The French language spread through the Norman court. [3]")
    ]
    table = relevance_table(cases, 0.5, {"keywords": support})
    rows = {}
    for line in table.splitlines()[2:]:
        lang, _, test, threshold, own, unrelated, near = (cell.strip() for cell in line.strip("|").split("|"))
        rows[(lang, test, threshold)] = (own, unrelated, near)
    # Lexical first, then the judge: the unrelated insert is caught at every threshold, the answer's own sentence
    # is kept (the lexical test passes it, the judge scores it above the lowest threshold).
    for threshold in ("0.1", "0.3", "0.5"):
        own, unrelated, _ = rows[("en", "lexical + judge", threshold)]
        assert unrelated == "1/1 (100.0%)"
    assert rows[("en", "judge", "0.1")][0] == "0/1 (0.0%)"
    # The near insert (another article's sentence about the Normans) is caught by both tests together.
    assert rows[("en", "lexical + judge", "0.3")][2] == "1/1 (100.0%)"


def test_a_shorter_answers_run_takes_the_first_questions_of_every_set() -> None:
    picked = [{"set": name, "id": f"{name}{i}"} for name in ("squad", "hotpotqa", "jsquad") for i in range(3)]
    assert [c["id"] for c in first_of_each_set(picked, 2)] == [
        "squad0",
        "squad1",
        "hotpotqa0",
        "hotpotqa1",
        "jsquad0",
        "jsquad1",
    ]
    assert first_of_each_set(picked, 0) == picked


def test_a_held_out_check_leaves_out_the_questions_of_the_answers_it_was_chosen_on(tmp_path: Path) -> None:
    def line(question_id: str) -> str:
        passages = [{"id": "normans-p0", "title": "Normans", "text": NORMAN_1}]
        record = {"id": question_id, "set": "squad", "question": "Who?", "answers": ["Rollo"], "passages": passages}
        return json.dumps({**record, "answer": "Their duke was Rollo [1]."}) + "\n"

    chosen_on, held_out = tmp_path / "answers.jsonl", tmp_path / "heldout.jsonl"
    chosen_on.write_text(line("q1") + line("q2"))
    held_out.write_text(line("q2") + line("q3"))
    assert [c.id for c in load_cases(held_out)] == ["q2", "q3"]
    assert [c.id for c in load_cases(held_out, exclude=chosen_on)] == ["q3"]
