"""The LLM-free grounding gates: lexical support of an answer, and grounded generation around it."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import BaseMessage

from gateway.providers.llm import LLMClient
from gateway.settings import ModelPrice
from pipelines.shared.citations import drop_phantom_citations, states_nothing
from pipelines.shared.deps import Passage
from pipelines.shared.generation import generate_grounded
from pipelines.shared.persona import Assistant
from pipelines.shared.prompts import ABSTAIN_EN, ABSTAIN_JA, ANSWER_CUE, ANSWER_CUE_JA, NOT_IN_CONTEXT
from pipelines.shared.support import claim_terms, lexical_support, terms
from tests.calibration_support import grounding_policy
from tests.fakes.scripted_chat import ScriptedChatModel


def min_support() -> float:
    return grounding_policy().min_support


VPN_QUESTION = "When was the VPN policy updated?"
VPN_EVIDENCE = ["The VPN policy was last updated on 12 March 2024 by the IT security team."]

OFFICE_EVIDENCE_EN = ["The Osaka office has 120 desks and opened in 2015."]
ROOM_EVIDENCE_JA = ["東京オフィスの大会議室の定員は二十人です。予約は総務部が管理しています。"]
ROOM_QUESTION_JA = "東京オフィスの大会議室の定員は？"


# --- lexical support ------------------------------------------------------------------------------


def test_answer_copied_from_evidence_is_supported() -> None:
    support = lexical_support("The VPN policy was last updated on 12 March 2024 [1].", VPN_QUESTION, VPN_EVIDENCE)
    assert support.supported(min_support())
    assert support.ratio == 1.0
    assert support.missing == ()
    assert support.missing_numbers == ()
    assert support.novel_terms > 0


def test_answer_that_only_repeats_the_question_has_nothing_novel() -> None:
    support = lexical_support("The VPN policy was updated.", VPN_QUESTION, ["Unrelated text about lunch."])
    assert support.novel_terms == 0
    assert support.ratio == 1.0
    assert support.supported(min_support())


def test_invented_entity_is_unsupported() -> None:
    support = lexical_support("Hiroshi Tanaka updated the VPN policy [1].", VPN_QUESTION, VPN_EVIDENCE)
    assert not support.supported(min_support())
    assert {"hiroshi", "tanaka"} <= set(support.missing)
    assert support.ratio < min_support()


def test_invented_name_is_reported_missing_even_inside_a_mostly_copied_answer() -> None:
    answer = "The VPN policy was last updated on 12 March 2024 by Hiroshi Tanaka [1]."
    support = lexical_support(answer, VPN_QUESTION, VPN_EVIDENCE)
    assert support.missing == ("hiroshi", "tanaka")
    assert support.ratio < 1.0
    assert not support.supported(1.0)


def test_number_absent_from_evidence_is_unsupported_even_when_words_match() -> None:
    support = lexical_support("The VPN policy was last updated on 14 March 2024 [1].", VPN_QUESTION, VPN_EVIDENCE)
    assert support.missing_numbers == ("14",)
    assert not support.supported(0.0)  # numbers are a hard gate, whatever the ratio threshold


def test_numbers_from_the_question_are_not_novel() -> None:
    question = "What happened to the VPN policy in 2024?"
    support = lexical_support("It was updated in 2024 [1].", question, ["The policy was updated."])
    assert support.missing_numbers == ()


def test_thousands_separators_are_normalised_in_the_number_check() -> None:
    support = lexical_support("The budget is 1,200,000 yen.", "What is the budget?", ["Budget: 1200000 yen."])
    assert support.missing_numbers == ()


def test_number_reformatted_with_thousands_separators_is_supported() -> None:
    support = lexical_support("The budget is 1,200,000 yen.", "What is the budget?", ["Budget: 1200000 yen."])
    assert support.supported(min_support()), support


def test_citations_and_stopwords_are_ignored() -> None:
    assert terms("According to the documents, the answer is in the passage [1] [2, 3].") == set()
    answer = "According to the documents [7], it was updated on 12 March 2024 [1][2, 3]."
    support = lexical_support(answer, VPN_QUESTION, VPN_EVIDENCE)
    assert support.missing_numbers == ()  # 7, 1, 2, 3 are citation numbers, not claims
    assert support.missing == ()
    assert support.supported(min_support())


def test_japanese_answer_over_english_evidence_is_judged_by_numbers_only() -> None:
    question = "How many desks does the Osaka office have?"
    # Different script: the words are a translation and are not compared.
    unrelated_words = lexical_support(
        "大阪オフィスには120台の机があり、2015年に開設されました。", question, OFFICE_EVIDENCE_EN
    )
    assert unrelated_words.novel_terms == 0
    assert unrelated_words.supported(min_support())

    wrong_number = lexical_support("大阪オフィスには150台の机があります。", question, OFFICE_EVIDENCE_EN)
    assert wrong_number.missing_numbers == ("150",)
    assert not wrong_number.supported(min_support())


def test_japanese_answer_over_japanese_evidence_uses_character_bigrams() -> None:
    copied = lexical_support("東京オフィスの大会議室の定員は二十人です [1]。", ROOM_QUESTION_JA, ROOM_EVIDENCE_JA)
    assert copied.supported(min_support())
    assert copied.missing == ()

    paraphrased = lexical_support("定員は二十人で、予約は総務部が管理しています。", ROOM_QUESTION_JA, ROOM_EVIDENCE_JA)
    assert paraphrased.supported(min_support())
    assert paraphrased.novel_terms > 0

    invented = lexical_support(
        "大会議室は経理部の山田さんが毎週金曜日に清掃しています。", ROOM_QUESTION_JA, ROOM_EVIDENCE_JA
    )
    assert not invented.supported(min_support())
    assert {"山田", "経理", "清掃"} <= set(invented.missing)
    assert all(len(term) == 2 for term in invented.missing)


def test_japanese_number_absent_from_japanese_evidence_is_unsupported() -> None:
    support = lexical_support("定員は30人です。", ROOM_QUESTION_JA, ROOM_EVIDENCE_JA)
    assert support.missing_numbers == ("30",)
    assert not support.supported(min_support())


def test_full_width_digits_are_normalised() -> None:
    support = lexical_support("定員は２０人です。", ROOM_QUESTION_JA, ["東京オフィスの大会議室の定員は20人です。"])
    assert support.missing_numbers == ()


TOWN_EVIDENCE_JA = ["霧里町は、美浜県北部の山あいにある町である。人口は約1万2千人。"]
TOWN_QUESTION_JA = "霧里町の人口はどのくらいですか？"


@pytest.mark.parametrize(
    "answer",
    [
        "霧里町の人口は約1万2千人です。[1]",
        "The town has a population of about 12,000 people. [1]",  # the value in digits, in another script
    ],
)
def test_a_number_in_myriad_units_supports_the_same_value_in_digits(answer: str) -> None:
    support = lexical_support(answer, TOWN_QUESTION_JA, TOWN_EVIDENCE_JA)
    assert support.missing_numbers == ()
    assert support.supported(min_support())


def test_a_different_value_in_myriad_units_is_unsupported() -> None:
    support = lexical_support("人口は約1万3千人です。[1]", TOWN_QUESTION_JA, TOWN_EVIDENCE_JA)
    assert support.missing_numbers == ("13000",)
    assert not support.supported(min_support())
    # Units multiply and add: 3億5000万 is 350,000,000, not 3 and 5000.
    assert lexical_support("3億5000万円", "売上は？", ["売上は350,000,000円。"]).missing_numbers == ()


@pytest.mark.parametrize(
    ("answer", "evidence"),
    [
        # Paraphrases of the passage whose only "new" bigrams were seams between a word and its ending, or yes.
        ("はい、どちらも使えます [1]。", "フリープランでも、モバイルアプリとAPIを使える。"),
        (
            "解約の場合とダウングレードの場合では扱いが異なります [1]。",
            "解約の場合とダウングレードの場合は扱いが異なる。",
        ),
        ("約12,000人です。[1]", "霧里町の人口は約1万2千人。"),  # "約" stands between digits: found in "は約"
    ],
)
def test_japanese_seams_and_reply_words_are_not_invented_content(answer: str, evidence: str) -> None:
    support = lexical_support(answer, "どうですか？", [evidence])
    assert support.missing == ()
    assert support.supported(min_support())


def test_claim_terms_keep_kanji_and_katakana_and_drop_what_holds_hiragana() -> None:
    assert claim_terms("経理部の山田さんがはい") == {"経理", "理部", "山田"}
    assert claim_terms("タスクノートを使う") == {"タス", "スク", "クノ", "ノー", "ート"}


PLANS_EVIDENCE_JA = ["スタンダードプランは1ユーザーあたり月額900円、ビジネスプランは1ユーザーあたり月額1,800円である。"]
PLANS_QUESTION_JA = "電話サポートを受けられるプランの料金は？"


def test_a_japanese_answer_of_digits_and_one_kanji_has_its_words_compared() -> None:
    # By characters "1,800円 [2]" is one-tenth CJK and looked like a translation; by letters it is Japanese.
    copied = lexical_support("1,800円 [2]", PLANS_QUESTION_JA, PLANS_EVIDENCE_JA)
    assert copied.novel_terms > 0
    assert copied.supported(min_support())
    invented = lexical_support("2,400ドル [2]", PLANS_QUESTION_JA, PLANS_EVIDENCE_JA)
    assert "ドル" in invented.missing
    assert not invented.supported(min_support())


# --- grounded generation --------------------------------------------------------------------------

PASSAGES = [
    Passage("c0", "weather", "Weather", "Tomorrow will be sunny with light wind.", 0.05),
    Passage("c1", "leave", "Leave policy", "New employees receive 12 days of paid leave per year.", 0.61),
    Passage("c2", "vpn", "VPN policy", VPN_EVIDENCE[0], 0.52),
]


def scripted(answer: str) -> tuple[LLMClient, ScriptedChatModel]:
    def respond(_messages: list[BaseMessage], _kwargs: dict[str, Any]) -> str:
        return answer

    model = ScriptedChatModel(responder=respond)
    return LLMClient(model, model_name="scripted", price=ModelPrice()), model


async def test_no_relevant_passage_abstains_without_calling_the_model() -> None:
    llm, model = scripted("The VPN policy was last updated on 12 March 2024 [1].")
    policy = grounding_policy()
    result = await generate_grounded(llm, VPN_QUESTION, PASSAGES[:1], policy, node="generate")
    assert result.abstained
    assert result.answer == ABSTAIN_EN
    assert result.cited == []
    assert result.call is None
    assert model.calls == []
    assert "relevance" in result.note
    assert f"{policy.min_relevance:.2f}" in result.note
    assert "0.05" in result.note  # the best score seen


async def test_no_passages_at_all_abstains_without_calling_the_model() -> None:
    llm, model = scripted("anything")
    result = await generate_grounded(llm, VPN_QUESTION, [], grounding_policy(), node="generate")
    assert result.abstained
    assert model.calls == []
    assert "relevance" in result.note


async def test_model_saying_insufficient_context_abstains() -> None:
    llm, model = scripted(NOT_IN_CONTEXT)
    result = await generate_grounded(llm, VPN_QUESTION, PASSAGES, grounding_policy(), node="generate")
    assert result.abstained
    assert result.answer == ABSTAIN_EN
    assert result.cited == []
    assert len(model.calls) == 1
    assert result.call is not None
    assert result.call.node == "generate"


@pytest.mark.parametrize("reply", ["[2]", "[1] [2] [3]", " [1, 2]. "])
async def test_answer_of_citation_numbers_alone_abstains(reply: str) -> None:
    llm, model = scripted(reply)
    result = await generate_grounded(llm, VPN_QUESTION, PASSAGES, grounding_policy(), node="generate")
    assert result.abstained
    assert result.answer == ABSTAIN_EN
    assert result.note == "model gave only citations"
    assert len(model.calls) == 1


async def test_supported_answer_cites_the_second_usable_passage() -> None:
    answer = "The VPN policy was last updated on 12 March 2024 [2]."
    llm, model = scripted(answer)
    result = await generate_grounded(llm, VPN_QUESTION, PASSAGES, grounding_policy(), node="generate")
    assert not result.abstained
    assert result.answer == answer
    # PASSAGES[0] is below the relevance floor, so [2] is PASSAGES[2], the second usable one.
    assert result.cited == [PASSAGES[2]]
    assert result.call is not None
    assert result.note == ""
    # The model saw only the usable passages, numbered from 1.
    (messages, _kwargs) = model.calls[0]
    prompt = str(messages[-1].content)
    assert "[1] (Leave policy)" in prompt
    assert "[2] (VPN policy)" in prompt
    assert "Weather" not in prompt
    assert VPN_QUESTION in prompt


async def test_answer_without_citations_cites_every_usable_passage() -> None:
    llm, _ = scripted("The VPN policy was last updated on 12 March 2024.")
    result = await generate_grounded(llm, VPN_QUESTION, PASSAGES, grounding_policy(), node="generate")
    assert not result.abstained
    assert result.cited == PASSAGES[1:]


async def test_answer_inventing_a_number_abstains_as_unsupported() -> None:
    llm, model = scripted("The VPN policy was last updated on 30 June 2024 [2].")
    result = await generate_grounded(llm, VPN_QUESTION, PASSAGES, grounding_policy(), node="generate")
    assert result.abstained
    assert result.answer == ABSTAIN_EN
    assert result.cited == []
    assert "unsupported" in result.note
    assert "30" in result.note
    assert len(model.calls) == 1
    assert result.call is not None  # the call happened and is still accounted for


@pytest.mark.parametrize("reply", [NOT_IN_CONTEXT, "VPNポリシーは2099年に更新されました [2]。"])
async def test_japanese_question_gets_the_japanese_abstention(reply: str) -> None:
    llm, _ = scripted(reply)
    result = await generate_grounded(
        llm, "VPNポリシーはいつ更新されましたか？", PASSAGES, grounding_policy(), node="generate"
    )
    assert result.abstained
    assert result.answer == ABSTAIN_JA


async def test_the_prompt_ends_in_the_answers_language() -> None:
    # After the English cue the local model answered most Japanese questions with citation numbers alone.
    llm, model = scripted("VPNポリシーは2024年3月12日に更新されました [2]。")
    await generate_grounded(llm, "VPNポリシーはいつ更新されましたか？", PASSAGES, grounding_policy(), node="generate")
    await generate_grounded(llm, VPN_QUESTION, PASSAGES, grounding_policy(), node="generate")
    japanese, english = (str(messages[-1].content) for messages, _ in model.calls)
    assert japanese.endswith(f"\n{ANSWER_CUE_JA}")
    assert english.endswith(f"\n{ANSWER_CUE}")
    # A profile that fixes English keeps the English cue for a Japanese question.
    await generate_grounded(
        llm, "VPNポリシーはいつ?", PASSAGES, grounding_policy(), node="generate", assistant=Assistant(language="en")
    )
    assert str(model.calls[-1][0][-1].content).endswith(f"\n{ANSWER_CUE}")


async def test_japanese_question_without_relevant_passages_gets_the_japanese_abstention() -> None:
    llm, model = scripted("anything")
    result = await generate_grounded(
        llm, "VPNポリシーはいつ更新されましたか？", PASSAGES[:1], grounding_policy(), node="generate"
    )
    assert result.answer == ABSTAIN_JA
    assert model.calls == []


@pytest.mark.parametrize(
    ("raw", "passages", "cleaned", "says_nothing"),
    [
        # The local model's loop: counting citations until max_tokens, after a sentence that never ended.
        (
            "The maximum payload of the robot is [1] [2] [3] [4] [5] [42].",
            1,
            "The maximum payload of the robot is [1].",
            True,
        ),
        ("It carries 300 kg [1][2], and runs 14 h [3].", 2, "It carries 300 kg [1] [2], and runs 14 h.", False),
        ("It carries 300 kg [1, 5].", 2, "It carries 300 kg [1].", False),
        ("[1] [2]", 2, "[1] [2]", True),
        ("Yes [1].", 1, "Yes [1].", False),
        ("Its payload is 300 kg, as stated in [2].", 2, "Its payload is 300 kg, as stated in [2].", False),
        ("名古屋支社です [1]", 1, "名古屋支社です [1]", False),
    ],
)
def test_phantom_citations_are_dropped_and_an_answer_that_says_nothing_is_recognised(
    raw: str, passages: int, cleaned: str, says_nothing: bool
) -> None:
    assert drop_phantom_citations(raw, passages) == cleaned
    assert states_nothing(cleaned) is says_nothing


TSUYU_PASSAGES = [
    Passage(
        "t1",
        "tsuyu",
        "梅雨",
        "梅雨は、北海道を除く日本で6月から7月にかけて見られる雨の多い時期である。"
        "気象庁は各地の梅雨入りと梅雨明けを発表する。梅雨前線の位置で天気が変わる。",
        0.6,
    ),
    Passage("t2", "tsuyu", "梅雨", "梅雨の期間はふつう1か月から1か月半程度である。梅雨の時期には湿度が高い。", 0.6),
]


async def test_the_round_check_withholds_an_on_topic_invention_and_reports_why_when_nothing_is_left() -> None:
    invented = "ただし、梅雨前線が停滞したまま立秋を過ぎると、梅雨明けの発表はされない[1]。"
    grounded = "梅雨の期間はふつう1か月から1か月半程度である[2]。"
    checked = grounding_policy(judge_below=0.4)
    llm, _ = scripted(grounded + invented)
    result = await generate_grounded(llm, "梅雨の期間はどのくらいか", TSUYU_PASSAGES, checked, node="generate")
    assert result.answer.startswith("梅雨の期間はふつう1か月から1か月半程度である")
    assert "立秋" not in result.answer
    assert [w.index for w in result.withheld] == [1]
    lexical_only, _ = scripted(grounded + invented)
    unchecked = await generate_grounded(
        lexical_only, "梅雨の期間はどのくらいか", TSUYU_PASSAGES, grounding_policy(), node="g"
    )
    assert "立秋" in unchecked.answer  # the lexical test alone lets it through
    alone, _ = scripted(invented)
    result = await generate_grounded(alone, "梅雨の期間はどのくらいか", TSUYU_PASSAGES, checked, node="generate")
    assert result.abstained
    assert result.note == "unsupported by passages: 停滞, 立秋"
