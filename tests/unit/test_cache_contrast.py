"""The contrast guard: every rule refuses its kind of reversal, in English and Japanese, and lets paraphrases pass."""

from __future__ import annotations

from collections import Counter

import pytest

from gateway.cache.contrast import (
    RULES,
    Contrast,
    Rule,
    analyse,
    dates_differ,
    direction_differs,
    entities_differ,
    find_contrast,
    language_differs,
    negation_differs,
    numbers_differ,
    roles_differ,
    term_substituted,
)
from routes.offline.eval.semantic_cache import load_pairs


def fires(rule: Rule, a: str, b: str) -> bool:
    return rule(analyse(a), analyse(b)) is not None


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("How many vacation days after 5 years?", "How many vacation days after 10 years?"),
        ("Who approves expenses over $500?", "Who approves expenses over $5,000?"),
        ("How do I order lunch for a team of three?", "How do I order lunch for a team of twelve?"),
        ("勤続5年の社員の有給休暇は何日ですか？", "勤続10年の社員の有給休暇は何日ですか？"),
        ("5万円以上の経費は誰が承認しますか？", "50万円以上の経費は誰が承認しますか？"),
        ("三人分の弁当を注文したい", "五人分の弁当を注文したい"),
        ("第1会議室はどこですか？", "第2会議室はどこですか？"),
    ],
)
def test_numbers_differ(a: str, b: str) -> None:
    assert fires(numbers_differ, a, b)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("Who approves expenses over $5,000?", "Who approves expenses over $5000?"),  # thousands separator
        ("When did World War II end?", "In what year did the Second World War end?"),  # roman and ordinal
        ("２泊の出張の日当は？", "2泊の出張の日当は？"),  # full-width digits
        ("3人分の弁当を注文したい", "三人分の弁当を注文したい"),  # kanji numerals
        ("5万円以上の経費", "50000円以上の経費"),  # 万
        ("日本で一番長い川はどこですか？", "日本で最も長い川は何ですか？"),  # 一番 means "most"
        ("May I work from home?", "Can I work from home?"),  # modal "may" is not a month
        ("What happens in May?", "What happens in the month of May?"),
    ],
)
def test_equal_numbers_do_not_differ(a: str, b: str) -> None:
    assert not fires(numbers_differ, a, b)


def test_months_count_as_numbers() -> None:
    assert fires(numbers_differ, "What was decided in March?", "What was decided in May?")
    assert not fires(numbers_differ, "What happens on March 3?", "What happens on 3/3?")


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("What is on the menu for Monday?", "What is on the menu for Tuesday?"),
        ("What were the revenue figures for last year?", "What were the revenue figures for this year?"),
        ("What is the agenda for tomorrow's standup?", "What is the agenda for today's standup?"),
        ("来週の全体会議はいつですか？", "今週の全体会議はいつですか？"),
        ("月曜日の社員食堂のメニューは？", "火曜日の社員食堂のメニューは？"),
        ("午前の会議はどこですか？", "午後の会議はどこですか？"),
    ],
)
def test_dates_differ(a: str, b: str) -> None:
    assert fires(dates_differ, a, b)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("Which employees have completed the training?", "Which employees have not completed the training?"),
        ("Can I expense meals with a receipt?", "Can I expense meals without a receipt?"),
        ("Why does the plan cover dental care?", "Why doesn’t the plan cover dental care?"),  # curly apostrophe
        ("研修を受講した社員は誰ですか？", "研修を受講していない社員は誰ですか？"),
        ("給与が振り込まれたときは？", "給与が振り込まれなかったときは？"),
        ("参加できる研修はどれですか？", "参加できません研修はどれですか？"),
        ("ユーロを使う国は？", "ユーロを使わずに済む国は？"),
    ],
)
def test_negation_differs(a: str, b: str) -> None:
    assert fires(negation_differs, a, b)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("Submit the report by Friday", "Submit the report no later than Friday"),  # a bound, not a negation
        ("Is it cold whether or not it rains?", "Is it cold if it rains?"),
        ("社員数が一番多いオフィスは？", "社員数が一番少ないオフィスは？"),  # 少ない is "few", not a negation
        ("申請する必要がありますか？", "申請しなければならないですか？"),  # "must", not a negation
    ],
)
def test_idioms_are_not_negations(a: str, b: str) -> None:
    assert not fires(negation_differs, a, b)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("Where is the Tokyo office?", "Where is the Osaka office?"),
        ("How do I install Zoom?", "How do I install Teams?"),
        ("What is Alice Chen's extension?", "What is Bob Tanaka's extension?"),
        ("田中さんの内線番号は？", "佐藤さんの内線番号は？"),
        ("Salesforceへのアクセス権は？", "Jiraへのアクセス権は？"),
        ("アトラスプロジェクトのリーダーは？", "ボレアリスプロジェクトのリーダーは？"),
        ("営業部の出張規定を教えてください。", "法務部の出張規定を教えてください。"),
    ],
)
def test_entities_differ(a: str, b: str) -> None:
    assert fires(entities_differ, a, b)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("What is the guest Wi-Fi password?", "What is the guest wifi password?"),  # case and hyphen
        ("Who runs the Osaka branch?", "Who is the manager of the Osaka branch?"),
        ("Is there a dress code in the office?", "Does the office have a dress code?"),  # sentence-initial words
        (
            "セキュリティ事故を報告するには？",
            "セキュリティインシデントはどうやって報告しますか？",
        ),  # one-sided katakana
        ("来客用Wi-Fiのパスワードは？", "お客様用のWI-FIのパスワードを教えて"),
    ],
)
def test_same_entities_do_not_differ(a: str, b: str) -> None:
    assert not fires(entities_differ, a, b)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("Who joined the company before Alice?", "Who joined the company after Alice?"),
        ("Which office has the most employees?", "Which office has the fewest employees?"),
        ("Who is the oldest employee?", "Who is the youngest employee?"),
        ("Which expense claims are above the limit?", "Which expense claims are below the limit?"),
        ("Which office has the most employees?", "Which office has employees?"),  # a pole in one query only
        ("10万円以上の経費精算には何が必要ですか？", "10万円以下の経費精算には何が必要ですか？"),
        ("入社前にやるべきことは？", "入社後にやるべきことは？"),
        ("太陽系で最大の惑星は？", "太陽系で最小の惑星は？"),
    ],
)
def test_direction_differs(a: str, b: str) -> None:
    assert fires(direction_differs, a, b)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("How many days can I take at most?", "What is the maximum number of days I can take?"),
        ("Can I work from home?", "Am I allowed to work from home?"),  # permission counts only when opposed
        ("What were the revenue figures for last year?", "What were the revenue figures for the last year?"),
        ("名前を変更するには？", "氏名を変更するには？"),  # 名前 ("name") is not 前 ("before")
        ("午後の予定は？", "午後のスケジュールは？"),
    ],
)
def test_same_direction_does_not_differ(a: str, b: str) -> None:
    assert not fires(direction_differs, a, b)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("Who reports to Alice?", "Whom does Alice report to?"),
        ("Who manages Bob?", "Whom does Bob manage?"),
        ("Did Acme acquire Globex?", "Did Globex acquire Acme?"),
        ("Is Tokyo bigger than Osaka?", "Is Osaka bigger than Tokyo?"),
        ("Does Alice work for Bob?", "Does Bob work for Alice?"),
        ("Which teams depend on the Payments team?", "Which teams does the Payments team depend on?"),
        ("田中さんに報告しているのは誰ですか？", "田中さんは誰に報告していますか？"),
        ("鈴木さんを管理しているのは誰ですか？", "鈴木さんが管理しているのは誰ですか？"),
        ("A社はB社を買収しましたか？", "B社はA社を買収しましたか？"),
        ("東京は大阪より大きいですか？", "大阪は東京より大きいですか？"),
        ("中村さんは誰の上司ですか？", "中村さんの上司は誰ですか？"),
    ],
)
def test_roles_differ(a: str, b: str) -> None:
    assert fires(roles_differ, a, b)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("Who manages Bob?", "Who is Bob's manager?"),  # "Bob's" = "of Bob" = object
        ("What is the capital of Australia?", "Which city is Australia's capital?"),
        ("How do I join the Slack channel for the Atlas project?", "How can I join the Atlas project's Slack channel?"),
        ("VPNのパスワードをリセットする方法は？", "VPNのパスワードはどうすればリセットできますか？"),  # は: topic
        ("東京オフィスの住所を教えてください。", "東京オフィスはどこにありますか？"),
        ("田中さんの上司は誰ですか？", "田中さんを管理しているのは誰ですか？"),
    ],
)
def test_same_roles_do_not_differ(a: str, b: str) -> None:
    assert not fires(roles_differ, a, b)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("How do I join the Slack channel?", "How do I leave the Slack channel?"),
        ("What happens if I submit the report late?", "What happens if I submit the report early?"),
        ("東京の人口は？", "大阪の人口は？"),
        ("ノートパソコンを申請するには？", "ノートパソコンを返却するには？"),
    ],
)
def test_term_substituted(a: str, b: str) -> None:
    assert fires(term_substituted, a, b)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("How do I reset my password?", "How do I reset my passwords?"),  # a variant, not a substitution
        ("What time does the cafeteria open?", "When does the cafeteria open?"),  # only function words differ
        ("会議室の予約方法を教えてください。", "会議室の予約方法を教えて。"),
    ],
)
def test_variants_are_not_substitutions(a: str, b: str) -> None:
    assert not fires(term_substituted, a, b)


def test_language_differs() -> None:
    assert fires(language_differs, "What is the capital of Japan?", "日本の首都はどこですか？")
    assert not fires(language_differs, "Salesforceへのアクセス権は？", "Jiraへのアクセス権はどうやって申請しますか？")


def test_find_contrast_names_the_rule_and_the_reason() -> None:
    found = find_contrast("Who joined before Alice?", "Who joined after Alice?")
    assert found == Contrast("direction_differs", found.reason if found else "")
    assert found is not None
    assert "time" in found.reason
    assert find_contrast("Where is the VPN guide?", "where  is the VPN guide?") is None  # same normalised text
    assert find_contrast("How do I reset my VPN password?", "How can I reset the password for my VPN?") is None


def test_rules_are_tried_in_order_and_can_be_chosen() -> None:
    a, b = "Who joined in 2020 before Alice?", "Who joined in 2021 after Alice?"
    assert [r.__name__ for r in RULES][:2] == ["language_differs", "numbers_differ"]
    assert find_contrast(a, b) == Contrast("numbers_differ", "numbers differ: ['2020'] vs ['2021']")
    assert find_contrast(a, b, rules=(direction_differs,)) is not None
    assert find_contrast(a, b, rules=()) is None


def test_pair_set_covers_what_it_must() -> None:
    pairs = load_pairs()
    kinds = Counter((p.kind, p.lang) for p in pairs)
    assert kinds["paraphrase", "en"] + kinds["paraphrase", "ja"] >= 60
    assert kinds["contrast", "en"] + kinds["contrast", "ja"] >= 60
    assert kinds["paraphrase", "ja"] >= 20
    assert kinds["contrast", "ja"] >= 20
    categories = Counter((p.category, p.lang) for p in pairs if p.kind == "contrast")
    for category in ("number", "date", "negation", "entity", "comparison", "role"):
        assert min(categories[category, "en"], categories[category, "ja"]) >= 3, category
    assert len({(p.a, p.b) for p in pairs}) == len(pairs)


def test_guard_refuses_every_contrast_pair_with_a_marker() -> None:
    """Calibration regression: all marked contrasts (every category but "topic") are refused."""
    missed = [
        (p.a, p.b)
        for p in load_pairs()
        if p.kind == "contrast" and p.category != "topic" and not find_contrast(p.a, p.b)
    ]
    assert missed == []


def test_guard_lets_most_paraphrases_through() -> None:
    paraphrases = [p for p in load_pairs() if p.kind == "paraphrase"]
    refused = [(p.a, p.b) for p in paraphrases if find_contrast(p.a, p.b)]
    assert len(refused) <= len(paraphrases) // 20, refused  # at most 5% lost to the guard's caution
