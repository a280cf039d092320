"""Word lists and patterns of the contrast guard (EN and JA): data, kept apart from the rules that use it."""

from __future__ import annotations

import re

from pipelines.shared import STOPWORDS


def word_set(words: str) -> frozenset[str]:
    return frozenset(words.split())


def _pairs(spec: str) -> dict[str, str]:
    """``"at_least=amount- ..."`` -> ``{"at least": "amount-", ...}``: word lists stay readable in a few lines."""
    return {key.replace("_", " "): value for key, _, value in (item.partition("=") for item in spec.split())}


def _numbered(spec: str) -> dict[str, str]:
    """``"zero|first|two second"`` -> each word mapped to the index of its group."""
    return {word: str(i) for i, group in enumerate(spec.split("|")) for word in group.split()}


APOSTROPHES = str.maketrans({"’": "'", "‘": "'", "`": "'"})
DIGITS = re.compile(r"(\d+(?:\.\d+)?)\s*(万|億)?")
THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
KANJI_DIGITS = {c: i for i, c in enumerate("〇一二三四五六七八九")}
KANJI_UNITS = {"十": 10, "百": 100, "千": 1000}
KANJI_NUMBER = re.compile(
    r"第((?:[〇一二三四五六七八九十百千](?!半期))+)"
    r"|(?<!\d)([〇一二三四五六七八九十百千][〇一二三四五六七八九十百千万億]*)"
    r"(?=[人日月年回件個時分円名週歳階台本枚泊号番つ割倍点位]|か月|ヶ月)"
)
WORD_NUMBERS = _numbered(
    "zero|first|two second twice|three third|four fourth|five fifth|six sixth|seven seventh|eight eighth|nine ninth"
    "|ten tenth|eleven|twelve dozen"
) | _pairs("twenty=20 thirty=30 forty=40 fifty=50 hundred=100 thousand=1000")
ROMAN = _pairs("II=2 III=3 IV=4 VI=6 VII=7 VIII=8 IX=9 XI=11 XII=12")
MONTHS = _numbered(
    "|january jan|february feb|march|april apr|may|june jun|july jul|august aug|september sep sept|october oct"
    "|november nov|december dec"
)
DATE_WORDS = _pairs(
    "monday=dow1 tuesday=dow2 wednesday=dow3 thursday=dow4 friday=dow5 saturday=dow6 sunday=dow7 today=day0 "
    "tonight=day0 tomorrow=day+1 yesterday=day-1 a.m.=am p.m.=pm"
)
EN_RELATIVE = re.compile(r"\b(this|current|last|previous|past|next|coming|following)\s+(year|quarter|month|week)\b")
EN_OFFSETS = _pairs("this=0 current=0 last=-1 previous=-1 past=-1 next=+1 coming=+1 following=+1")
JA_DATES = _pairs(
    "今日=day0 本日=day0 明日=day+1 昨日=day-1 前日=day-1 翌日=day+1 今週=week0 先週=week-1 来週=week+1 今月=month0 "
    "先月=month-1 来月=month+1 今年=year0 本年=year0 去年=year-1 昨年=year-1 前年=year-1 来年=year+1 翌年=year+1 "
    "今期=term0 前期=term-1 来期=term+1 午前=am 午後=pm"
)
JA_DATE = re.compile("|".join(sorted(JA_DATES, key=len, reverse=True)) + r"|([月火水木金土日])曜")

EN_NEGATION = re.compile(
    r"\b(not|no|never|none|nobody|nothing|nowhere|neither|nor|without|cannot|unable|lacks?|lacking|excluding|except)\b"
    r"|n't\b"
)
EN_NOT_NEGATION = re.compile(r"\b(whether or not|not only|no matter|no (?:more|less|later|earlier|fewer) than)\b")
JA_NEGATION = re.compile(r"(?<![少危幼])な(?:い|く|かっ|し)|ません|せず|ずに|無い|無し|不可|不要|以外|未(?!満|来)")
JA_NOT_NEGATION = re.compile(
    r"なければ(?:なら|いけ)ない|なくては(?:なら|いけ)ない|ないと(?:いけ|だめ)|かもしれない|構わない|構いません|かまわない"
)

# axis -> (words of one pole, words of the other); EN words are whole words, JA entries are regexes.
EN_AXES = {
    "amount": (
        "more most greater greatest larger largest bigger biggest higher highest above exceed exceeds exceeding "
        "maximum increase increased increases longer longest expensive pricier",
        "less least fewer fewest smaller smallest lower lowest below minimum decrease decreased decreases "
        "shorter shortest cheaper cheapest",
    ),
    "time": ("before earlier earliest prior previously", "after later latest since afterwards"),
    "age": ("older oldest elder eldest senior", "younger youngest newer newest junior"),
    "quality": ("better best", "worse worst"),
    "speed": ("faster fastest quicker quickest", "slower slowest"),
    "phase": ("open opens opening start starts begin begins", "close closes closing closed end ends finish finishes"),
    "flow": ("import upload inbound incoming buy bought hired", "export download outbound outgoing sell sold fired"),
    "permission": ("allowed permitted", "prohibited forbidden banned"),
}
# "Can I…" / "Am I allowed to…" ask the same; "most" / none do not: only these axes count a one-sided pole.
ONE_POLE_AXES = word_set("amount time age order")
EN_BOUNDS = _pairs(
    "at_least=amount- no_less_than=amount- at_most=amount+ no_more_than=amount+ "
    "no_later_than=time+ no_earlier_than=time-"
)
EN_BOUND = re.compile(r"\b(" + "|".join(EN_BOUNDS) + r")\b")
EN_NUMERIC_DIRECTION = re.compile(r"\b(over|under|up to)\s+(?=[$¥€£]?\d)")
JA_AXES = {
    "amount": (
        r"以上|超え|超|上回|多い|多く|最多|最大|大きい|高い|最高|増|上限|長い|重い",
        r"以下|未満|下回|少ない|少な|最少|最小|小さい|低い|最低|減|下限|短い|安い|軽い",
    ),
    "time": (r"(?<![名午手])前(?![提年期日月週])|以前|事前|早い|早く", r"(?<![午最今])後|以降|以後|遅い|遅く"),
    "age": (r"年上|年長", r"年下|年少"),
    "order": (r"最初|初め", r"最後|終わり"),
    "phase": (r"開始|始ま|開き|開く|開い", r"終了|終わる|閉ま|閉じ"),
    "flow": (
        r"輸入|アップロード|入金|購入|受信|(?<!新)入社|入会|採用",
        r"輸出|ダウンロード|出金|販売|送信|退社|退会|解雇",
    ),
    "quality": (r"最良|ベスト", r"最悪|ワースト"),
    "permission": (r"許可", r"禁止"),
}

# Suffixes two single-word substitutes may differ by and still be one word ("booking" ~ "booked").
EN_INFLECTION = re.compile(r"(?:ing|ed|es|s|er|ers|ion)$")
EN_TOKEN = re.compile(r"[A-Za-z][A-Za-z0-9'\-&]*|\d+(?:\.\d+)?")
AUX = word_set("do does did has have had can could will would should may might must")
COPULA = word_set("is are was were")
WH = word_set("who whom what which whose when where why how")
MODIFIER = word_set("the a an this that these those our my your their its his her any every each some")
EN_PREP_ROLE = _pairs("to=to into=to towards=to toward=to from=from than=than of=obj by=subj")
EN_OTHER_PREP = word_set("in on at for with about during across within via per")
EN_JOINERS = word_set("and or as")
NOT_ENTITY = STOPWORDS | word_set(
    "i please tell list show give explain describe find name compare help is are was were do does did can could "
    "will would should may might must hi hello am if let there here"
)
JA_RUN = re.compile(r"[一-龥々]+|[ァ-ヴー]+|[A-Za-z][A-Za-z0-9\-.&]*|\d+|[ぁ-ゖ]+|[^\s]")
JA_CONTENT = re.compile(r"[一-龥々ァ-ヴーA-Za-z]")  # a run that carries meaning (not kana grammar or digits)
JA_HONORIFIC = re.compile(r"(さん|様|さま|氏|君|くん|ちゃん|部長|課長|社長|係長|室長|先生)")
_JA_SUFFIXES = "支社|支店|本社|事業所|工場|大学|銀行|株式会社|部|課|社|県|市|区|町|村|駅|山|川"
JA_SUFFIX_AFTER = re.compile(f"(?:{_JA_SUFFIXES})")
JA_SUFFIX_ENDING = re.compile(f"(?:{_JA_SUFFIXES})$")
# Particle after a term -> its role; longest first ("には" before "に"); "?" = says nothing about the role.
JA_PARTICLES = tuple(
    _pairs(
        "について=? にとって=? によって=subj に対して=to には=to からは=from では=? とは=? "
        "に=to へ=to から=from より=than を=obj が=subj は=subj"
    ).items()
)
