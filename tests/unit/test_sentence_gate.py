"""The sentence gate: which sentences of an answer leave, and the same answer however its text arrives."""

from __future__ import annotations

import re

import pytest

from pipelines.shared.events import Withhold
from pipelines.shared.prompts import NOT_IN_CONTEXT
from pipelines.shared.sentence_gate import SentenceGate

EVIDENCE = [
    "The Kumo Carrier K9 is a delivery robot built by Kumo Robotics in Osaka. It carries loads of up to 40 kg.",
    "Its battery lasts eight hours.",
]
QUESTION = "What is the Kumo Carrier K9?"
EVIDENCE_JA = ["梅雨は、北海道を除く日本で6月から7月にかけて見られる雨の多い時期である。気象庁が梅雨入りを発表する。"]


def gate(question: str = QUESTION, evidence: list[str] = EVIDENCE) -> SentenceGate:
    return SentenceGate(question, evidence, passages=len(evidence), min_support=0.5)


def passed(text: str, pieces: list[str] | None = None, **kwargs: object) -> tuple[list[str], SentenceGate]:
    checked = gate(**kwargs)  # type: ignore[arg-type]
    sent = [piece for part in (pieces or [text]) for piece in checked.feed(part)]
    return [*sent, *checked.close()], checked


def test_an_invented_sentence_among_grounded_ones_is_withheld_and_the_rest_go_on() -> None:
    answer = (
        "The K9 is a delivery robot built in Osaka [1]. It carries loads of up to 40 kg [1]. "
        "It also flies over rivers and was designed by astronauts on the Moon [1]. Its battery lasts eight hours [2]."
    )
    sent, checked = passed(answer)
    assert sent == [
        "The K9 is a delivery robot built in Osaka [1].",
        " It carries loads of up to 40 kg [1].",
        " Its battery lasts eight hours [2].",
    ]
    (held,) = checked.withheld
    assert (held.index, held.reason) == (2, "unsupported")
    assert held.sentence == "It also flies over rivers and was designed by astronauts on the Moon [1]."
    assert {"astronauts", "moon"} <= set(held.missing)
    assert checked.text == "".join(sent)


def test_a_number_the_evidence_lacks_withholds_the_sentence() -> None:
    sent, checked = passed("It carries loads of up to 45 kg [1].")
    assert sent == []
    assert checked.withheld == [
        Withhold(index=0, sentence="It carries loads of up to 45 kg [1].", reason="unsupported", missing=("45",))
    ]


@pytest.mark.parametrize("split", ["char", "word"])
def test_fed_token_by_token_the_gate_sends_what_it_sends_for_the_whole_answer(split: str) -> None:
    answer = "The K9 is a delivery robot [1]. It was built on Mars by 3 astronauts [1]. It carries 40 kg [1]."
    whole, checked_whole = passed(answer)
    pieces = list(answer) if split == "char" else re.findall(r"\s*\S+", answer)
    streamed, checked = passed(answer, pieces)
    assert streamed == whole
    assert checked.withheld == checked_whole.withheld
    assert checked.text == checked_whole.text == "The K9 is a delivery robot [1]. It carries 40 kg [1]."


def test_citations_alone_and_phantom_citations() -> None:
    sent, checked = passed("[1] [2]. It carries 40 kg [7].")
    assert sent == ["It carries 40 kg."]  # the phantom [7] is dropped, the sentence kept
    assert checked.withheld == [Withhold(index=0, sentence="[1] [2].", reason="states_nothing")]


def test_a_decline_before_any_answer_is_the_models_no_answer_not_a_withheld_sentence() -> None:
    sent, checked = passed(NOT_IN_CONTEXT)
    assert (sent, checked.declined, checked.withheld) == ([], True, [])
    sent, checked = passed(f"The K9 is a delivery robot [1]. {NOT_IN_CONTEXT}")
    assert sent == ["The K9 is a delivery robot [1]."]
    assert not checked.declined
    assert [w.reason for w in checked.withheld] == ["declined"]


def test_japanese_sentences_are_checked_by_their_kanji_and_katakana() -> None:
    answer = "梅雨は6月から7月にかけての雨の多い時期です[1]。梅雨はフランスの科学者が名付けました[1]。"
    sent, checked = passed(answer, question="梅雨とは何ですか？", evidence=EVIDENCE_JA)
    assert sent == ["梅雨は6月から7月にかけての雨の多い時期です [1]。"]  # citations are spaced as in English
    (held,) = checked.withheld
    assert held.index == 1
    assert "フラ" in held.missing or "科学" in held.missing
