"""Cheap structural features of a query, in English and Japanese.

The embedding says what a query is about; these say how it is built — comparisons, bridges
("the director of the film that …"), arithmetic, requests to transform inline text — which is
what separates the routes independently of topic, so the router does not just learn the topics
of its training sets.
"""

from __future__ import annotations

import functools
import math
import re

import numpy as np

from pipelines.shared import content_terms, tokens
from routes.probe import QUESTIONS_KEPT

FEATURE_VERSION = 4

_PATTERNS: dict[str, re.Pattern[str]] = {
    "comparison": re.compile(
        r"\b(which|who)\b.{0,60}\b(older|younger|first|earlier|later|larger|bigger|smaller|longer|shorter|"
        r"higher|more|fewer|less|most|least)\b|\b(compare|comparison|versus|vs\.?)\b|\bthan\b"
        r"|どちら|どっち|比べ|より(も)?(多|少|大|小|高|低|長|短|早|古|新)|一番|最も",
        re.I,
    ),
    "both_same": re.compile(r"\b(both|same|either|neither|in common|also)\b|両方|同じ|共通|いずれも|ともに", re.I),
    "bridge": re.compile(
        r"\b(of the|of a|whose|that|which|who)\b.{0,80}\b(is|was|were|are|has|had|did|does)\b"
        r"|の(.{1,12})(は|が)(誰|何|どこ|いつ|いくつ|何人|何年)",
        re.I,
    ),
    "aggregate": re.compile(
        r"\b(total|combined|sum|altogether|how many .* in all|difference)\b|合計|合わせ|差は|総", re.I
    ),
    "greeting": re.compile(
        r"^(hi|hello|hey|good (morning|afternoon|evening)|thanks|thank you|bye|goodbye|cheers)\b"
        r"|こんにちは|こんばんは|おはよう|ありがとう|さようなら|よろしく|お疲れ",
        re.I,
    ),
    "transform": re.compile(
        r"\b(translate|rewrite|rephrase|summari[sz]e|proofread|paraphrase|shorten|fix (the )?grammar|"
        r"make (this|it) (more )?)\b|翻訳|訳して|書き直|要約|言い換え|校正|添削|直して",
        re.I,
    ),
    "about_assistant": re.compile(r"\b(you|your|yourself)\b|あなた|君は|きみ", re.I),
    "code": re.compile(r"```|\bdef |\bfunction\b|;\s*$|[{}]|\bSELECT\b|\bimport\b|=>|\(\)", re.I | re.M),
    "arithmetic": re.compile(
        r"\d\s*[-+*/×÷^%]\s*\d|\b(plus|minus|times|divided|squared|percent of)\b|足す|引く|掛け|割る", re.I
    ),
    "wh_question": re.compile(
        r"^\s*(what|who|when|where|which|how|why|in what|on what|at what)\b|何|誰|いつ|どこ|どの|どれ|なぜ",
        re.I,
    ),
    "date_or_number": re.compile(r"\d"),
}
_CAPITALISED = re.compile(r"\b[A-Z][a-z]+(?:\s+(?:[A-Z][a-z]+|of|the|de|von))*")
_QUOTED = re.compile(r"[\"“「『].+?[\"”」』]")
_JAPANESE = re.compile(r"[\u3040-\u30ff\u4e00-\u9fff]")
_KATAKANA_RUN = re.compile(r"[\u30a0-\u30ff]{2,}")

NAMES: tuple[str, ...] = (
    *_PATTERNS.keys(),
    "log_chars",
    "log_words",
    "log_content_terms",
    "capitalised_spans",
    "quoted_spans",
    "katakana_spans",
    "japanese",
    "question_mark",
)


def features(text: str) -> np.ndarray:
    """A small dense vector, on a scale comparable to unit embedding entries once standardised."""
    stripped = text.strip()
    hits = [1.0 if pattern.search(stripped) else 0.0 for pattern in _PATTERNS.values()]
    # Japanese has no spaces: count tokens of the project's tokenizer (words, CJK bigrams), not splits.
    words = len(tokens(stripped))
    content = len(content_terms(stripped))
    japanese = bool(_JAPANESE.search(stripped))
    values = [
        *hits,
        math.log1p(len(stripped)),
        math.log1p(words),
        math.log1p(content),
        float(len(_CAPITALISED.findall(stripped))),
        float(len(_QUOTED.findall(stripped))),
        float(len(_KATAKANA_RUN.findall(stripped))),
        1.0 if japanese else 0.0,
        1.0 if stripped.endswith(("?", "？")) else 0.0,
    ]
    return np.asarray(values, dtype=np.float32)


@functools.lru_cache(maxsize=QUESTIONS_KEPT)
def active_cues(text: str) -> tuple[str, ...]:
    """Names of the structural patterns a query matches, for the decision and its ``reason``. Kept per text, like
    the probe's question terms: the request path reads them while the query vector is computed
    (``FrontRouter.read_question``)."""
    return tuple(name for name, pattern in _PATTERNS.items() if pattern.search(text))
