"""One tokenizer for every place the project compares words, in English and Japanese.

Japanese has no spaces, so splitting on whitespace or ``\\w+`` turns a Japanese sentence into one
"word" and every overlap, coverage or BM25 score on it into noise (BM25 finds the gold JSQuAD
paragraph for 27% of questions that way). Measured with ``python -m tests.benchmarks.tokenizer_compare``
against three morphological analysers whose dictionaries ship on PyPI (janome, sudachipy +
sudachidict_core, fugashi + unidic-lite), overlapping character bigrams of each CJK run retrieve the
gold JSQuAD paragraph as well (BM25 recall@1 0.88 vs 0.86-0.88, recall@4 0.94-0.95 for all) and
separate it from distractors better (the gold paragraph has the best query-term coverage for 86% of
questions vs 77-79%: an analyser's particles and common verbs match everywhere). They are also
faster (2.5x sudachi, 4x fugashi, 70x janome), need no 200-260 MB dictionary and have no
out-of-vocabulary words, which is what a tenant's knowledge base is full of: product names, katakana
loanwords, invented place names.

Latin-script text is cut into casefolded words (NFKC, digits kept, thousands separators dropped so
"1,800" matches "1800"); a CJK run inside a Latin sentence, or the reverse, is handled by its own
script. ``content_terms`` drops function words: an English stopword list, and hiragana-only bigrams
that are particles or inflection endings.

This module lives in ``pipelines.shared`` because every layer may import pipelines (the gateway
does; pipelines never import the gateway): features, relevance, support, cache contrast and the
evaluation metrics can all use the same definition of a word.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Literal

BACKEND = "cjk-bigrams"

# Hiragana, katakana (with the long-vowel mark and iteration marks), CJK ideographs.
_CJK_CHARS = "\u3040-\u309f\u30a0-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3005\u3006\u30fc"
_TOKEN = re.compile(rf"(?P<cjk>[{_CJK_CHARS}]+)|(?P<word>[^\W_{_CJK_CHARS}]+)")
_CJK = re.compile(rf"[{_CJK_CHARS}]")
_HIRAGANA_ONLY = re.compile(r"[\u3040-\u309f]+")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")

_EN_STOPWORDS = """
    a an the of in on at to for from by with and or but not no nor is are was were be been being am
    do does did done has have had having it its this that these those there here as into onto
    over under than then so such very can could would should will shall may might must about above
    after before again against all any both each few more most other some own same too only just
    out off up down why how what which who whom whose when where i me my we our you your he him his
    she her they them their s t
"""
EN_STOPWORDS = frozenset(_EN_STOPWORDS.split())

# Particles and inflection endings that carry no topic. A bigram is dropped only when it is made
# of hiragana and listed here: "わさび" keeps its bigrams, "には" does not.
_JA_FUNCTION_BIGRAMS = """
    です ます でし まし した して しま する され れる られ ない なか かっ った って てい いる いた
    ある あっ あり りま こと もの ため よう から まで など ので のは には では とは への での との
    にも でも とも ても ては たら れば なっ なる なり につ つい いて にお おい ける によ より よっ
    だっ であ どう この その あの それ これ いつ どこ だれ なに なん どれ どち ちら
    すか れま ませ せん でき きる きな くな なく るの くだ ださ さい しょ ょう
"""
JA_FUNCTION_BIGRAMS = frozenset(_JA_FUNCTION_BIGRAMS.split())


def normalise(text: str, *, fold_case: bool = True) -> str:
    """NFKC (full-width Latin and digits become ASCII), casefolded, and thousands separators dropped
    so "１，８００円" and "1800円" share the number. ``fold_case=False`` keeps the case, for a reader that asks how a
    word was written (a name is capitalised)."""
    text = unicodedata.normalize("NFKC", text)
    return _THOUSANDS.sub("", text.casefold() if fold_case else text)


def _bigrams(run: str) -> list[str]:
    if len(run) == 1:
        return [run]
    return [run[i : i + 2] for i in range(len(run) - 1)]


def tokens(text: str) -> list[str]:
    """Every token in order, with repeats (what BM25 and term frequencies need)."""
    out: list[str] = []
    for match in _TOKEN.finditer(normalise(text)):
        if match.lastgroup == "cjk":
            out.extend(_bigrams(match.group()))
        else:
            out.append(match.group())
    return out


def _is_content(token: str) -> bool:
    if _CJK.match(token):
        if _HIRAGANA_ONLY.fullmatch(token):
            return len(token) > 1 and token not in JA_FUNCTION_BIGRAMS
        return True
    return token not in EN_STOPWORDS


def content_terms(text: str) -> list[str]:
    """Tokens that say what a text is about, in order with repeats: no stopwords, no particles."""
    return [t for t in tokens(text) if _is_content(t)]


# A CJK run cut where its script changes: kanji (with the iteration marks), katakana (with the long-vowel
# mark and the middle dot), hiragana. Japanese writes content words in kanji and katakana and particles and
# inflections in hiragana, so the cuts fall close to word boundaries without a dictionary.
_SCRIPT_RUN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3005\u3006]+|[\u30a0-\u30ff]+|[\u3040-\u309f]+")


def content_words(text: str) -> list[str]:
    """Content *words*, in order with repeats: Latin words as :func:`tokens` cuts them (no stopwords), and
    each CJK run cut at script changes with its hiragana pieces dropped ("タスクノートを提供している会社" ->
    "タスクノート", "提供", "会社").

    For counting how much of a question a passage holds, where every word must weigh the same: in bigrams a
    six-character katakana name counts five times and "出身" once, so a document holding the name but not
    the birthplace looked like it held most of the question. Matching a CJK word is a substring test on the
    normalised text (:func:`normalise`), so no dictionary is needed on either side."""
    out: list[str] = []
    for match in _TOKEN.finditer(normalise(text)):
        if match.lastgroup == "cjk":
            out.extend(w for w in _SCRIPT_RUN.findall(match.group()) if not _HIRAGANA_ONLY.fullmatch(w))
        elif match.group() not in EN_STOPWORDS:
            out.append(match.group())
    return out


def has_cjk(text: str) -> bool:
    return _CJK.search(text) is not None


def cjk_share(text: str) -> float:
    """Share of the characters that are kana or kanji (0 for an empty text)."""
    return len(_CJK.findall(text)) / len(text) if text else 0.0


_LATIN_LETTER = re.compile(r"[^\W\d_\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3005\u3006]")


def writing_script(text: str) -> Literal["cjk", "latin"] | None:
    """The script a text is written in, read from its letters alone: "cjk" when kana and kanji are at least a third
    of them, "latin" otherwise, None when it has no letters.

    Digits, punctuation and citation markers belong to no language. Counted by characters, the Japanese answer
    "1,800円 [2]" is one-tenth CJK and looked like an English answer over Japanese passages, so its words were
    not compared and a critic was asked instead; by letters it is Japanese, and "12 [1]" is in no script at all.
    """
    cjk = len(_CJK.findall(text))
    latin = len(_LATIN_LETTER.findall(text))
    if not cjk and not latin:
        return None
    return "cjk" if cjk * 3 >= cjk + latin else "latin"


def same_script(a: str, b: str) -> bool:
    """Whether two texts' words can be compared: written in one script, or one of them in none."""
    script_a, script_b = writing_script(a), writing_script(b)
    return script_a is None or script_b is None or script_a == script_b
