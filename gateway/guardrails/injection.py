"""Instructions smuggled into a prompt or a passage: patterns everywhere, and a small classifier on prompts.

No model call: patterns take microseconds, the classifier (character n-grams and a logistic regression,
trained at start-up on the train split of deepset/prompt-injections, half a second) about 0.1 ms a prompt.
The classifier reads prompts only: trained on what users type, it takes encyclopedic passages for
injections (most of the dev passages, measured), so passages are screened by the patterns alone.

The patterns name what an injection does, in English, Japanese and German (the public set it was
measured on mixes English and German): override what came before ("ignore the above", "以前の指示を
無視"), hand the model a new role or task ("you are now", "from now on", "新しいタスク"), pull the
hidden prompt out ("show me your prompt", "システムプロンプト"), or fake the chat template's own
markers. They were written against the training part of deepset/prompt-injections only; its test part
is the held-back measure (``tests/benchmarks/guardrails.py``).
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections import Counter
from dataclasses import dataclass
from importlib import resources
from itertools import chain

from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression

# Words whose vocabulary n-grams are kept (an LRU per classifier): a stream of prompts mostly reuses its words.
WORD_NGRAMS = 16384
# Chosen by 5-fold cross-validation on the train split (recall 0.86, false positives 2.9% with the patterns)
# and by false positives on the dev questions (0.7%); the held-back test split is not read here.
CLASSIFIER_THRESHOLD = 0.7

_EN_OVERRIDE = (
    r"\b(?:ignore|disregard|forget|skip|override|bypass|drop|leave)\b[^.!?\n]{0,40}?"
    r"\b(?:previous|prior|above|preceding|earlier|former|foregoing|all|any|your|the|those|these|everything)\b[^.!?\n]{0,30}?"
    r"\b(?:instructions?|directions?|directives?|tasks?|prompts?|rules|guidelines|orders?|commands?|assignments?"
    r"|information|context|everything|said|constraints|restrictions|policies|programming)\b"
)
_PATTERNS: tuple[tuple[str, str], ...] = (
    ("override", _EN_OVERRIDE),
    (
        "override",
        r"\b(?:forget|ignore|disregard)\s+(?:about\s+)?(?:everything|all\s+(?:of\s+)?that|that|this|the\s+above)\b",
    ),
    ("override", r"\b(?:ignore|disregard)\s+(?:the\s+)?(?:above|previous|preceding)\b"),
    ("override", r"\bstart\s+(?:over|from\s+(?:scratch|the\s+(?:front|beginning)))\b"),
    ("new_task", r"\bnew\s+(?:tasks?|assignment|challenge)\b|\b(?:your|following)\s+new\s+(?:instructions?|rules)\b"),
    ("new_task", r"\b(?:with|on)\s+(?:the\s+)?(?:following|another|a\s+further|further)\s+tasks?\b"),
    ("new_task", r"\b(?:additional|your)\s+instructions?\s*(?:are|is|-|:)"),
    (
        "override",
        r"\b(?:not\s+by|disregarding|regardless\s+of|despite|instead\s+of)\s+(?:the\s+)?"
        r"(?:articles?|context|documents?|passages?|what\s+you(?:'ve|\s+have)\s+been\s+told)\b",
    ),
    ("override", r"\bdo\s+not\s+answer\s+(?:this|the)\s+question\b|\bmake\s+(?:something|it)\s+up\b"),
    ("override", r"\b(?:attention|achtung)\s*[-:!]+\s*(?:stop|stopp)\b|^\s*stop\s*[:!]"),
    ("override", r"\b(?:olvid[ae]\w*|zaboravi)\b"),
    ("exfiltrate", r"\bwhat\s+is\s+written\s+above\b|\binformation\s+in\s+the\s+prompt\b"),
    (
        "role",
        r"^\W*(?:ok(?:ay)?\W+)?(?:now\s+)?you\s+are\s+(?:the\s+)?[A-Z]|\bstay\s+in\s+(?:their|your|his|her)\s+roles?\b",
    ),
    ("new_task", r"\b(?:now|next)\s*,?\s+(?:concentrate|focus)\s+on\b"),
    ("new_task", r"\bnow\s+(?:write|answer|say|output|print|respond|tell|generate|translate)\b"),
    (
        "role",
        r"\b(?:you\s+are\s+now|now\s+you\s+are|from\s+now\s+on|you\s+will\s+now|pretend\s+(?:to\s+be|you\s+are|that)|"
        r"(?:^|[.!?]\s*|\byou\s+(?:will\s+|must\s+|should\s+|to\s+)?|\bplease\s+)act\s+as\b|i\s+want\s+you\s+to\s+act|role-?play\s+as|stay\s+in\s+character|"
        r"you\s+are\s+(?:DAN|an?\s+(?:evil|unfiltered|uncensored))|developer\s+mode|do\s+anything\s+now|jailbreak)",
    ),
    (
        "exfiltrate",
        r"\b(?:show|reveal|print|output|display|repeat|tell|give|leak|spell)\b[^.!?\n]{0,30}?\b(?:your|the|all|initial|original|hidden|system)\s+"
        r"(?:\w+\s+){0,2}(?:prompts?|instructions|prompt\s+texts?|system\s+message|rules|password|secret)\b",
    ),
    ("exfiltrate", r"\bsystem\s+prompt\b"),
    (
        "template",
        r"(?:<\|im_start\|>|<\|im_end\|>|<\|system\|>|\[/?INST\]|<</?SYS>>|^\s*#{2,}\s*(?:system|instruction)|"
        r"^\s*(?:system|assistant)\s*:)",
    ),
    # Japanese
    (
        "override",
        r"(?:以前|これまで|上記|上|前|先ほど|今まで|すべて|全て)の(?:指示|命令|指令|ルール|設定|制約|プロンプト|内容)"
        r"(?:は|を)?(?:すべて|全て)?(?:無視|忘れ|破棄|取り消)",
    ),
    ("override", r"(?:指示|命令|ルール|制約)(?:は|を)(?:すべて|全て)?(?:無視|忘れ)"),
    ("new_task", r"新しい(?:指示|命令|タスク|役割)"),
    (
        "role",
        r"(?:あなたは|君は)(?:今から|これから|今日から)|として(?:振る舞|ふるま|行動し)|なりきっ|制限(?:を|は)?(?:解除|なし|無視)",
    ),
    ("exfiltrate", r"システムプロンプト|(?:初期|元|隠し)(?:の)?(?:指示|プロンプト)(?:を|は)?(?:表示|教え|見せ|出力)"),
    # German
    (
        "override",
        r"\b(?:vergiss|vergessen\s+sie|ignoriere|ignorieren\s+sie|missachte)\b[^.!?\n]{0,40}?"
        r"\b(?:alles|alle|vorherigen?|bisherigen?|obigen?|anweisungen|aufgaben|informationen|befehle)\b",
    ),
    ("new_task", r"\bneue\s+(?:aufgabe|aufgaben|anweisung|anweisungen|herausforderung)\b"),
    (
        "role",
        r"\b(?:du\s+bist\s+(?:jetzt|nun)|(?:jetzt|nun)\s+bist\s+du|tu\s+so\s+als|ab\s+(?:jetzt|sofort)\s+bist|spiel(?:e|en)?\s+die\s+rolle"
        r"|stell\s+dir\s+vor,?\s+du\s+bist|in\s+ihren\s+rollen|als\s+[\w-]+\s+fungieren)\b|^\W*du\s+bist\s+[A-Z]",
    ),
    ("new_task", r"\b(?:folgender|folgenden|weiteren|neuen)\s+aufgabe\b|\boder\s+du\s+stirbst\b"),
    (
        "exfiltrate",
        r"\b(?:zeige?|gib)\b[^.!?\n]{0,30}?\b(?:deine[nr]?|alle)\s+(?:\w+\s+){0,2}(?:prompts?|anweisungen|prompt-texte)\b",
    ),
)


# Sentence pieces that keep their own trailing space, so joining the kept ones rebuilds the text.
_SENTENCE = re.compile(r"(?<=[.!?。！？\n])(?!\n)")


@dataclass(frozen=True, slots=True)
class InjectionVerdict:
    flagged: bool
    kinds: tuple[str, ...] = ()


class InjectionClassifier:
    """P(injection) of a prompt: TF-IDF of character 2-4-grams (any language, no tokenizer) and a logistic
    regression.

    scikit-learn fits the model; a prompt is then scored here, with the same arithmetic in plain Python: the
    fitted vectoriser's own analyser makes each word's n-grams (kept for the last ``WORD_NGRAMS`` words: the
    analyser's per-character Python loop was most of a unique prompt's screening), and each
    vocabulary n-gram carries its idf and its idf times the model's coefficient. ``transform`` and
    ``predict_proba`` build sparse matrices and validate their input on every call (about a millisecond, most
    of a cache hit's CPU); the walk over one prompt's few hundred n-grams takes a fraction of that and gives
    the same probability (to rounding: ``tests/unit/test_guardrails_injection.py`` compares the two).
    """

    def __init__(self, texts: list[str], labels: list[int], *, threshold: float = CLASSIFIER_THRESHOLD) -> None:
        vectorizer = TfidfVectorizer(analyzer="char_wb", ngram_range=(2, 4), sublinear_tf=True, min_df=2)
        features = vectorizer.fit_transform(texts)
        model = LogisticRegression(C=16.0, max_iter=2000, class_weight="balanced").fit(features, labels)
        self._vectorizer, self._model = vectorizer, model
        self._analyse = vectorizer.build_analyzer()
        # n-gram -> its column; per column its idf and idf x coefficient: what one occurrence-weighted n-gram adds
        # to the norm and to the logit.
        self._columns: dict[str, int] = {gram: int(column) for gram, column in vectorizer.vocabulary_.items()}
        self._idf: list[float] = vectorizer.idf_.tolist()
        self._idf_coefficient: list[float] = (vectorizer.idf_ * model.coef_[0]).tolist()
        self._intercept = float(model.intercept_[0])
        self._word_columns = functools.lru_cache(maxsize=WORD_NGRAMS)(self._known_columns)
        self.threshold = threshold

    def _known_columns(self, word: str) -> tuple[int, ...]:
        """The vocabulary columns of one lowercased word's n-grams, with repeats, in the analyser's order (an
        n-gram outside the fitted vocabulary is no feature, as in ``transform``)."""
        columns = self._columns
        return tuple(columns[gram] for gram in self._analyse(word) if gram in columns)

    def probability(self, text: str) -> float:
        """The logistic regression's P(injection) of the l2-normalised, sublinear-tf TF-IDF vector of ``text``.

        ``char_wb`` n-grams never cross a word: the analyser lowercases the text and cuts each whitespace-separated
        word on its own, so a text's n-grams are its words' n-grams in turn, and each word's are remembered. The
        sums run over the same n-grams in the same order as the analyser's own walk over the text."""
        squares = logit = 0.0
        idf, weighted = self._idf, self._idf_coefficient
        for column, count in Counter(chain.from_iterable(map(self._word_columns, text.lower().split()))).items():
            tf = 1.0 + math.log(count)
            squares += (tf * idf[column]) ** 2
            logit += tf * weighted[column]
        score = self._intercept + (logit / math.sqrt(squares) if squares > 0.0 else 0.0)
        return 1.0 / (1.0 + math.exp(-score)) if score >= 0 else math.exp(score) / (1.0 + math.exp(score))

    def sklearn_probability(self, text: str) -> float:
        """The same probability through scikit-learn's ``transform`` and ``predict_proba`` (the reference)."""
        return float(self._model.predict_proba(self._vectorizer.transform([text]))[0, 1])

    def flags(self, text: str) -> bool:
        return self.probability(text) >= self.threshold


def train_classifier() -> InjectionClassifier:
    """The packaged train split (``gateway/guardrails/data``), trained now: half a second at start-up."""
    raw = (resources.files("gateway.guardrails") / "data" / "prompt_injections_train.jsonl").read_text("utf-8")
    rows = [json.loads(line) for line in raw.splitlines() if line.strip()]
    return InjectionClassifier([str(r["text"]) for r in rows], [int(r["label"]) for r in rows])


# Prompts whose verdict is remembered: a repeated question (what a cache hit is) is screened from memory.
PROMPT_VERDICTS = 4096


class InjectionDetector:
    """Which kinds of injected instruction a text carries (none: not flagged).

    A prompt's verdict is a pure function of its text, and the same prompt comes back whenever an answer is
    served from the cache: the last ``PROMPT_VERDICTS`` prompts' verdicts are kept (an LRU per detector), so
    a repeat costs a dictionary look-up instead of some thirty patterns and the classifier (~0.2 ms).
    """

    def __init__(self, classifier: InjectionClassifier | None = None) -> None:
        self._patterns = [(kind, re.compile(pattern, re.IGNORECASE | re.MULTILINE)) for kind, pattern in _PATTERNS]
        self._classifier = classifier
        self._prompt_verdict = functools.lru_cache(maxsize=PROMPT_VERDICTS)(self._screen_prompt)

    def redact(self, text: str) -> str:
        """``text`` without the sentences (or lines) that carry an instruction: the passage's facts still reach
        the model, the instruction does not. A match spanning sentences removes each sentence it touches."""
        pieces = _SENTENCE.split(text)
        spans: list[tuple[int, int]] = []
        for _, pattern in self._patterns:
            spans.extend(match.span() for match in pattern.finditer(text))
        if not spans:
            return text
        kept: list[str] = []
        start = 0
        for piece in pieces:
            end = start + len(piece)
            if not any(s < end and e > start for s, e in spans):
                kept.append(piece)
            start = end
        return "".join(kept).strip()

    def check(self, text: str, *, prompt: bool = False) -> InjectionVerdict:
        """``prompt``: the text is the user's, so the classifier reads it too (passages: patterns only)."""
        if prompt:
            return self._prompt_verdict(text)
        return self._verdict(text, classify=False)

    def _screen_prompt(self, text: str) -> InjectionVerdict:
        return self._verdict(text, classify=True)

    def _verdict(self, text: str, *, classify: bool) -> InjectionVerdict:
        kinds = {kind for kind, pattern in self._patterns if pattern.search(text)}
        if classify and self._classifier is not None and self._classifier.flags(text):
            kinds.add("classifier")
        return InjectionVerdict(bool(kinds), tuple(sorted(kinds)))
