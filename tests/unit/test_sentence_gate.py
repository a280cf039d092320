"""The sentence gate: which sentences of an answer leave, and the same answer however its text arrives."""

from __future__ import annotations

import re

import pytest

from gateway.settings import GroundingSettings
from pipelines.shared.deps import Passage
from pipelines.shared.events import Withhold
from pipelines.shared.prompts import NOT_IN_CONTEXT
from pipelines.shared.sentence_gate import RoundCheck, SentenceGate
from tests.calibration_support import grounding_policy, use_calibration

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


# Two paragraphs of one article: an invention on their topic shares their common words (梅雨前線, 梅雨明け, 発表).
TSUYU = [
    "梅雨は、北海道を除く日本で6月から7月にかけて見られる雨の多い時期である。"
    "気象庁は各地の梅雨入りと梅雨明けを発表する。梅雨前線の位置で天気が変わる。",
    "梅雨の期間はふつう1か月から1か月半程度である。梅雨の時期には湿度が高く、カビが生えやすい。",
]
TSUYU_INVENTED = "ただし、梅雨前線が停滞したまま立秋を過ぎると、梅雨明けの発表はされない。"


def checked_gate(evidence: list[str], question: str, below: float = 0.4) -> SentenceGate:
    check = RoundCheck.over(below, ["梅雨" for _ in evidence], evidence, use_calibration().judge)
    return SentenceGate(question, evidence, passages=len(evidence), min_support=0.5, check=check)


def test_the_round_check_withholds_an_invention_on_the_passages_topic_that_the_lexical_test_passes() -> None:
    answer = f"梅雨の期間はふつう1か月から1か月半程度である[2]。{TSUYU_INVENTED}[1]"
    lexical = SentenceGate("梅雨の期間はどのくらいか", TSUYU, passages=2, min_support=0.5)
    lexical.feed(answer)
    lexical.close()
    assert lexical.withheld == []  # every term but 停滞 and 立秋 is in the passages
    checked = checked_gate(TSUYU, "梅雨の期間はどのくらいか")
    sent = [*checked.feed(answer), *checked.close()]
    assert len(sent) == 1
    assert sent[0].startswith("梅雨の期間はふつう1か月から1か月半程度である")
    (held,) = checked.withheld
    assert (held.index, held.reason) == (1, "unsupported")
    assert held.sentence.startswith(TSUYU_INVENTED[:-1])


def test_the_round_check_passes_grounded_sentences_and_bare_values() -> None:
    checked = checked_gate(TSUYU, "梅雨の期間はどのくらいか")
    answer = "1か月から1か月半[2]。梅雨明けは気象庁が発表する[1]。"
    assert len([*checked.feed(answer), *checked.close()]) == 2
    assert checked.withheld == []
    english = SentenceGate(
        QUESTION,
        EVIDENCE,
        passages=2,
        min_support=0.5,
        check=RoundCheck.over(0.4, ("Kumo Carrier K9", "Battery"), EVIDENCE, use_calibration().judge),
    )
    grounded = "The K9 is a delivery robot built in Osaka [1]. It carries loads of up to 40 kg [1]."
    assert "".join([*english.feed(grounded), *english.close()]) == grounded


def test_the_round_checks_threshold_decides() -> None:
    check = RoundCheck.over(0.4, ("梅雨", "梅雨"), TSUYU, use_calibration().judge)
    score = check.score(TSUYU_INVENTED)
    assert 0.0 < score < 0.4
    assert RoundCheck.over(score, ("梅雨", "梅雨"), TSUYU, use_calibration().judge).passes(TSUYU_INVENTED)
    assert not check.passes(TSUYU_INVENTED)


def test_the_round_check_is_off_by_default_and_a_threshold_turns_it_on() -> None:
    passages = [Passage("c1", "d1", "梅雨", TSUYU[0], 0.5), Passage("c2", "d2", "梅雨", TSUYU[1], 0.5)]
    assert GroundingSettings().policy(use_calibration()).check(passages) is None
    check = GroundingSettings(sentence_judge_below=0.4).policy(use_calibration()).check(passages)
    assert check is not None
    assert (check.below, tuple(p.title for p in check.cjk)) == (0.4, ("梅雨", "梅雨"))
    assert grounding_policy().check(passages) is None


def test_the_round_check_has_nothing_to_read_without_a_round_or_a_claim_in_the_sentences_script() -> None:
    check = RoundCheck.over(0.4, ("梅雨",), TSUYU[:1], use_calibration().judge)
    assert check.score(TSUYU_INVENTED) == 1.0  # a lone passage
    mixed = RoundCheck.over(0.4, ("梅雨", "K9"), [TSUYU[0], EVIDENCE[0]], use_calibration().judge)
    # A passage in the other script cannot match the sentence's words: it is no round to read it in.
    assert mixed.score(TSUYU_INVENTED) == 1.0
    three = RoundCheck.over(0.4, ("梅雨", "梅雨", "K9"), [*TSUYU, EVIDENCE[0]], use_calibration().judge)
    assert three.score(TSUYU_INVENTED) < 0.4
    english = RoundCheck.over(0.4, ("Kumo Carrier K9", "Battery"), EVIDENCE, use_calibration().judge)
    assert english.score("According to the documents, the answer is in the passage [1].") == 1.0
