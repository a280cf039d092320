"""The probe's signals: coverage by one document vs several, in English and Japanese."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from pipelines.shared.deps import Passage
from pipelines.shared.visibility import Visibility
from routes.probe import (
    EMPTY_SIGNALS,
    SIGNAL_NAMES,
    ProbeFirstRetriever,
    probe_of,
    question_words,
    read_signals,
    titled_documents,
)


def passage(doc_id: str, text: str, score: float, title: str = "", index: int = 0) -> Passage:
    return Passage(f"{doc_id}:{index}", doc_id, title or doc_id, text, score)


BEACON = passage("beacon", "Beacon is developed by the Telemetry team, based in the Lisbon office.", 0.61, "Beacon")
LISBON = passage("lisbon", "The Lisbon office opened in 2016; about 140 people work there.", 0.52, "Lisbon office")
TRAVEL = passage("travel", "Economy class is required for flights under six hours.", 0.18, "Travel policy")


def test_one_document_holding_the_question_is_one_part() -> None:
    signals, cover = read_signals("When did the Lisbon office open?", [LISBON, BEACON, TRAVEL])
    assert signals.best_coverage == pytest.approx(1.0)
    assert signals.second_document_share == 0.0
    assert signals.covering_documents == 1
    assert cover == ("lisbon",)
    assert signals.top_score == pytest.approx(0.52)
    assert signals.margin == pytest.approx(0.52 - (0.61 + 0.18) / 2)


def test_a_bridge_question_is_covered_by_two_documents_together() -> None:
    question = "How many people work at the office where the team that develops Beacon is based?"
    signals, cover = read_signals(question, [BEACON, LISBON, TRAVEL])
    assert signals.union_coverage > signals.best_coverage
    assert signals.coverage_gain == pytest.approx(signals.union_coverage - signals.best_coverage)
    assert signals.second_document_share > 0.1
    assert signals.covering_documents == 2
    assert set(cover) == {"beacon", "lisbon"}
    assert signals.documents == 3


def test_japanese_is_compared_by_words_not_spaces() -> None:
    plans = passage("plans", "プロプランの月額料金は1ユーザーあたり1,200円です。", 0.5, "料金プラン")
    failure = passage("failure", "決済に失敗すると7日後にタスクの編集ができなくなります。", 0.45, "決済失敗")
    single, _ = read_signals("プロプランの月額料金はいくらですか", [plans, failure])
    assert single.best_coverage > 0.7
    assert single.covering_documents == 1
    assert single.second_document_share == 0.0
    both, cover = read_signals("プロプランの料金と、決済に失敗してから編集できなくなるまでの日数は？", [plans, failure])
    assert both.covering_documents == 2
    assert both.second_document_share > 0.2
    assert cover[0] in {"plans", "failure"}


def test_a_second_telling_of_the_same_facts_is_not_a_second_part() -> None:
    # Two outlets report one closure in their own words: the second holds words of the question the first lacks
    # ("mainland", "service"), but it states the same date and fleet size: a retelling, not another part.
    question = "When will the car ferry between the mainland and Saltmere return to service?"
    ledger = passage(
        "ledger",
        "Ostrel Line halts Saltmere car ferry crossings; sailings resume on 14 March. "
        "The line carries 900 vehicles a week.",
        0.5,
        "Harbour Ledger",
    )
    courier = passage(
        "courier",
        "Boats to the mainland will not return to service before 14 March, the operator "
        "said; 900 vehicles a week use the route.",
        0.45,
        "Valley Courier",
    )
    signals, _ = read_signals(question, [ledger, courier])
    assert signals.second_document_share > 0.1
    assert signals.shared_figures == 3  # 14, March, 900
    assert signals.distinct_second_share == 0.0
    # A date alone is two figures, its day and its month, as in Japanese (3月14日).
    dated = passage("courier", "Boats to the mainland will not return to service before 14 March.", 0.45, "Courier")
    assert read_signals(question, [ledger, dated])[0].distinct_second_share == 0.0
    # The bridge above shares no figure: its second part counts whole.
    bridge, _ = read_signals(
        "How many people work at the office where the team that develops Beacon is based?", [BEACON, LISBON, TRAVEL]
    )
    assert bridge.shared_figures == 0
    assert bridge.distinct_second_share == pytest.approx(bridge.second_document_share)
    # One shared figure is a coincidence a bridge has (the year its office opened, in the team's page too).
    team = passage("beacon", "Beacon is developed by the Telemetry team, based since 2016 in the Lisbon office.", 0.61)
    year, _ = read_signals(
        "How many people work at the office where the team that develops Beacon is based?", [team, LISBON]
    )
    assert year.shared_figures == 1
    assert year.second_document_share > 0.1
    assert year.distinct_second_share == pytest.approx(year.second_document_share)


def test_figures_the_question_gives_are_not_a_retelling() -> None:
    # Both documents mention the year the question names: that is the question's figure, not a repeated fact.
    question = "プロプランの料金と、2024年に決済に失敗してから編集できなくなるまでの日数は？"
    plans = passage("plans", "2024年のプロプランの月額料金は1ユーザーあたり1,200円です。", 0.5, "料金プラン")
    failure = passage(
        "failure", "2024年以降、決済に失敗すると7日後にタスクの編集ができなくなります。", 0.45, "決済失敗"
    )
    signals, _ = read_signals(question, [plans, failure])
    assert signals.shared_figures == 0
    assert signals.distinct_second_share == pytest.approx(signals.second_document_share)
    # The FAQ retelling the failure page (the same 7 days, and the same ¥1,200 written full-width) is one.
    priced = passage(
        "failure", "プロプラン（1,200円）の決済に失敗すると7日後に編集ができなくなります。", 0.45, "決済失敗"
    )
    faq = passage(
        "faq", "よくある質問：１，２００円のプロプランで支払いできないと、7日で編集不可になります。", 0.4, "FAQ"
    )
    retold, _ = read_signals("プロプランの決済に失敗したら、何日で編集できなくなりますか", [priced, faq])
    assert retold.shared_figures == 2
    assert retold.distinct_second_share == 0.0


def test_a_name_inside_a_longer_katakana_run_counts_as_found() -> None:
    doc = passage("mobile", "タスクノートモバイルアプリはiOSとAndroidに対応しています。", 0.4)
    signals, _ = read_signals("タスクノートはAndroidで使えますか", [doc])
    assert signals.entity_coverage == pytest.approx(1.0)


def test_chunks_of_one_document_are_one_document() -> None:
    first = passage("handbook", "Leave is 25 days a year.", 0.7, "Handbook", 0)
    second = passage("handbook", "Leave requests go to your manager.", 0.6, "Handbook", 1)
    signals, _ = read_signals("How many days of leave, and who approves requests?", [first, second])
    assert signals.documents == 1
    assert signals.second_document_share == 0.0
    assert signals.second_document_score == 0.0


def test_paragraphs_of_one_titled_article_are_one_document() -> None:
    # An article ingested paragraph by paragraph (SQuAD's shape): each paragraph has its own document id,
    # and one paragraph holds a word of the question the best one lacks. That is one source, not two parts.
    founding = passage("normans-p0", "The Normans gave their name to Normandy, a region in France.", 0.6, "Normans")
    rollo = passage("normans-p1", "Rollo, their first ruler, was a Viking leader.", 0.5, "Normans")
    signals, cover = read_signals("Which region of France did the Normans name, under their ruler?", [founding, rollo])
    assert signals.documents == 1
    assert signals.second_document_share == 0.0
    assert cover == ("normans-p0",)
    # The same two paragraphs under two titles are two sources, and the second holds a part.
    signals, cover = read_signals(
        "Which region of France did the Normans name, under their ruler?",
        [founding, passage("rollo", rollo.text, 0.5, "Rollo")],
    )
    assert signals.documents == 2
    assert signals.second_document_share > 0.0
    assert cover == ("normans-p0", "rollo")


def test_a_question_is_counted_by_words_not_by_bigrams_or_answer_kinds() -> None:
    # Stemmed (Snowball): "office" and "offices" are one word.
    assert question_words("In which year did the Lisbon office open?") == {"lisbon", "offic", "open"}
    assert question_words("How many people work there?") == {"peopl", "work"}
    # Kanji and katakana runs, hiragana dropped, interrogatives off the front of a word (何人 -> 人).
    assert question_words("タスクノートを提供している会社の代表取締役は何人ですか？") == {
        "タスクノート",
        "提供",
        "会社",
        "代表取締役",
        "人",
    }
    # A document holding the long name but not the birthplace holds one part of two, not 5 bigrams of 6.
    company = passage(
        "minato", "タスクノートを提供する会社はミナトソフトで、代表取締役は佐伯遥です。", 0.5, "ミナトソフト"
    )
    ceo = passage("saeki", "佐伯遥は札幌出身で、ミナトソフトを創業した。", 0.4, "佐伯遥")
    signals, cover = read_signals("タスクノートを提供している会社の代表取締役の出身は？", [company, ceo])
    assert signals.best_coverage == pytest.approx(4 / 5)
    assert signals.second_document_share == pytest.approx(1 / 5)
    assert cover == ("minato", "saeki")


def test_nothing_found_reads_as_empty() -> None:
    signals, cover = read_signals("Anything?", [])
    assert signals == EMPTY_SIGNALS
    assert cover == ()
    probe = probe_of("acme", "Anything?", [], depth=8)
    assert probe.empty
    assert probe.top(4) == []


def test_probe_serves_retrieval_only_up_to_its_depth() -> None:
    probe = probe_of("acme", "When did the Lisbon office open?", [LISBON, BEACON, TRAVEL], depth=8)
    assert not probe.empty
    assert probe.top(2) == [LISBON, BEACON]
    assert probe.top(8) == [LISBON, BEACON, TRAVEL]  # the store held only three
    assert probe.top(9) is None  # deeper than the probe searched: retrieval must search itself


def test_signals_are_numbers_with_stable_names() -> None:
    signals, _ = read_signals("When did the Lisbon office open?", [LISBON])
    values = signals.as_dict()
    assert tuple(values) == SIGNAL_NAMES
    assert all(isinstance(v, int | float) for v in values.values())
    assert signals.vector() == [float(v) for v in values.values()]


class CountingRetriever:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, int]] = []

    async def search(
        self, tenant: str, query: str, k: int, *, visibility: Visibility, vector: list[float] | None = None
    ) -> list[Passage]:
        self.calls.append((tenant, query, k))
        return [TRAVEL]


class DenseReuser(CountingRetriever):
    """A dense retriever: its search is the head of a dense ranking at least ``k`` deep."""

    async def search_reusing(
        self,
        tenant: str,
        query: str,
        k: int,
        *,
        visibility: Visibility,
        vector: list[float] | None,
        dense: Sequence[Passage],
        depth: int,
    ) -> list[Passage] | None:
        return list(dense[:k]) if k <= depth else None


async def test_retrieval_reuses_the_probe_for_the_same_search_only() -> None:
    question = "When did the Lisbon office open?"
    store = DenseReuser()
    everything = Visibility.everything()
    retriever = ProbeFirstRetriever(
        store, probe_of("acme", question, [LISBON, BEACON, TRAVEL], depth=8, visibility=everything)
    )
    assert await retriever.search("acme", question, 4, visibility=Visibility.everything()) == [LISBON, BEACON, TRAVEL]
    assert await retriever.search("acme", question, 2, vector=[0.1], visibility=Visibility.everything()) == [
        LISBON,
        BEACON,
    ]
    assert store.calls == []
    assert retriever.served == 2
    # A rewritten query, a deeper search or another tenant is searched for real.
    assert await retriever.search("acme", "Lisbon office opening year", 4, visibility=Visibility.everything()) == [
        TRAVEL
    ]
    assert await retriever.search("acme", question, 9, visibility=Visibility.everything()) == [TRAVEL]
    assert await retriever.search("globex", question, 4, visibility=Visibility.everything()) == [TRAVEL]
    # The probe was one reader's ranking: another reader's search of the same question is theirs, made afresh.
    hr = Visibility.of(["hr"], unset_open=False)
    assert await retriever.search("acme", question, 4, visibility=hr) == [TRAVEL]
    assert store.calls == [
        ("acme", "Lisbon office opening year", 4),
        ("acme", question, 9),
        ("globex", question, 4),
        ("acme", question, 4),
    ]
    # A probe that says not whose it was (an offline one) is never reused.
    unknown = ProbeFirstRetriever(store, probe_of("acme", question, [LISBON, BEACON, TRAVEL], depth=8))
    assert await unknown.search("acme", question, 4, visibility=everything) == [TRAVEL]
    assert unknown.served == 0
    # Without a probe (a forced direct route made none) every search goes to the store.
    bare = ProbeFirstRetriever(store, None)
    assert await bare.search("acme", question, 4, visibility=Visibility.everything()) == [TRAVEL]
    assert bare.served == 0
    # A retriever that cannot say how its search is made from a dense ranking (a wrapper) always searches.
    opaque = ProbeFirstRetriever(
        CountingRetriever(), probe_of("acme", question, [LISBON, BEACON, TRAVEL], depth=8, visibility=everything)
    )
    assert await opaque.search("acme", question, 2, visibility=Visibility.everything()) == [TRAVEL]
    assert opaque.served == 0


@pytest.mark.parametrize(
    ("question", "titles", "named"),
    [
        ("Which is the longer railway, the Pendrell Line or the Esker Line?", ["Pendrell Line", "Esker Line"], 2),
        ("Which is older, the town of Brinmoor or the University of Caddon?", ["Brinmoor", "Caddon", "Sorrel"], 2),
        ("Is the Pendrell Line longer than the Esker Line?", ["Pendrell Line", "Esker Line"], 2),
        # the qualifier is not how a question names a page, and two pages of one name are one name
        ("Are Frozen and Big Hero 6 both animated?", ["Frozen (2013 film)", "Frozen", "Big Hero 6 (film)"], 2),
        # a name standing inside a longer one the question uses is not another document
        ("Which is cheaper, Beacon or Beacon Lite?", ["Beacon", "Beacon Lite"], 2),
        ("How long is the Pendrell Line?", ["Pendrell Line", "Pendrell", "Esker Line"], 0),
        # titles used as words of one request are not two documents asked about
        ("Can you give me an overview of pricing?", ["Overview", "Pricing"], 0),
        ("How do I call the API from the CLI?", ["API", "CLI"], 0),
        # a Latin title counts where the question writes it as a name: common-word pages in lower case are words
        ("Where do I change billing and accounts settings?", ["Billing", "Accounts"], 0),
        ("Which page is newer, Billing or Accounts?", ["Billing", "Accounts"], 2),
        ("Which came first, the Dandy Warhols or Robert Young?", ["The Dandy Warhols", "Robert Young"], 2),
        # a name written as its title writes it counts, capital or not; one folding longer does not shift the rest
        ("Which is older, iOS or Android?", ["iOS", "Android"], 2),
        ("Straße: change billing and accounts settings", ["Billing", "Accounts", "Straße"], 0),
        ("料金プランの概要を教えてください", ["料金", "概要"], 0),
        # whole words only, and short Latin titles are words of any question
        ("Do IT and Lisbon offices differ?", ["IT", "Lisbon office", "Esker"], 0),
        # Japanese names anywhere in the text, without their quotation marks or reading; Latin names beside kana
        (
            "「白露」と「雪待」では、精米歩合が低いのはどちらですか？",
            ["「白露（しらつゆ）」", "「雪待」", "西峰工場"],
            2,
        ),
        ("夕凪川と白萩川では、どちらが長いですか？", ["夕凪川", "白萩川", "楢崎町"], 2),
        ("BeaconとLinnetはどちらが速いですか？", ["Beacon", "Linnet (train)"], 2),
        ("When did the Lisbon office open?", [], 0),
    ],
)
def test_titled_documents_counts_the_documents_a_question_asks_about_together(
    question: str, titles: list[str], named: int
) -> None:
    assert titled_documents(question, titles) == named


def test_the_signals_count_the_named_documents_among_the_probe() -> None:
    pendrell = passage("pendrell", "The Pendrell Line is 64 km long; it meets the Esker Line.", 0.6, "Pendrell Line")
    esker = passage("esker", "The Esker Line is 38 km long.", 0.5, "Esker Line")
    question = "Which is longer, the Pendrell Line or the Esker Line?"
    assert read_signals(question, [pendrell, esker])[0].titled_documents == 2
    assert read_signals(question, [pendrell, TRAVEL])[0].titled_documents == 0  # only the probe's documents count


def test_a_document_holds_a_question_word_in_any_inflection() -> None:
    """A paraphrase inflects: "services" asked, "service" written; "included" asked, "includes" written. Counted as
    different words, the best document lacked a part of the question and a document holding the stray form read as
    its second part."""
    asked = "Which services were included in the times the Brindle plan covered?"
    answer = passage("plan", "The Brindle plan includes one service at a time, and it covers weekends.", 0.8, "Plan")
    other = passage("else", "Services were included in the times of the old plan.", 0.4, "Elsewhere")
    signals, _ = read_signals(asked, [answer, other])
    assert signals.best_coverage == 1.0
    assert signals.second_document_share == 0.0
