"""The support gate, sentence by sentence: only sentences whose content is in the evidence leave the gateway.

An answer checked whole passes when most of it is supported, so one invented sentence among grounded ones went
out with its citation. Here each sentence (:mod:`pipelines.shared.sentences`) is checked on its own, with the
project's LLM-free check (:func:`pipelines.shared.support.lexical_support`, English words and Japanese kanji and
katakana bigrams, numbers by value) against the passages the generator was given, as it completes. A sentence that
fails is withheld, with a :class:`~pipelines.shared.events.Withhold` event saying which and why, and the answer goes
on with the later sentences that pass: ``python -m routes.offline.eval.sentence_gate`` measures why this policy and this
check (false withholds, inserted sentences caught).

A sentence the lexical test passes may still be an invention on the passages' own topic: it shares their common
words ("梅雨", "前線", "発表") and adds a claim none of them makes. A second test can read it as the round judge reads
a question (:class:`RoundCheck`): its words weighed by how few of the passages hold them, its best sentence and window
overlap; a sentence whose best passage the judge scores below the threshold is withheld too. It is off unless a
threshold is set: it reads wording, and a right answer in the model's own words reads like an invention to it.
``python -m routes.offline.eval.sentence_gate --relevance-judge`` measures both tests on the model's own answers and on
inserted sentences of neighbouring paragraphs.

The gate is the same object on both paths: a streamed answer is fed token by token and sends each sentence as it
passes, a non-streamed one is fed whole; the splitter cuts both alike, so the two answers are the same text.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from pipelines.shared.citations import drop_phantom_citations, states_nothing
from pipelines.shared.deps import Passage
from pipelines.shared.events import Withhold, WithholdReason
from pipelines.shared.judge import MIN_ROUND, JudgeModel, judge_round
from pipelines.shared.prompts import NOT_IN_CONTEXT
from pipelines.shared.sentences import Sentence, SentenceSplitter
from pipelines.shared.support import lexical_support, mostly_cjk, terms

MAX_MISSING = 5
# The cosine every passage is read at by the round check: the sentence is not embedded (no model call on the
# streaming path, where each sentence is checked as it completes), so the judge's cosine terms add the same to
# every passage and its margins nothing; its threshold is on that scale.
SAME_COSINE = 1.0


@dataclass(frozen=True, slots=True)
class RoundCheck:
    """The round judge as the gate's second support test: does some passage answer this sentence, read against the
    others? ``below``: the judge's score under which a sentence is withheld. The answer's passages are kept split by
    script (:meth:`over`): a sentence is read against those in its own."""

    below: float
    latin: tuple[Passage, ...]
    cjk: tuple[Passage, ...]
    model: JudgeModel  # the round judge fitted for the embedder in use (``routes.calibration``)

    @classmethod
    def over(cls, below: float, titles: Sequence[str], texts: Sequence[str], model: JudgeModel) -> RoundCheck:
        """The check over one answer's passages (their titles and texts, in the prompt's order)."""
        passages = [
            Passage(str(i), str(i), title, text, SAME_COSINE)
            for i, (title, text) in enumerate(zip(titles, texts, strict=True))
        ]
        cjk = tuple(p for p in passages if mostly_cjk(p.text))
        return cls(below, tuple(p for p in passages if p not in cjk), cjk, model)

    def passes(self, sentence: str) -> bool:
        return self.score(sentence) >= self.below

    def score(self, sentence: str) -> float:
        """The judge's score of the passage that best supports ``sentence``, read whole as a question is: the words
        it shares with the question anchor a grounded sentence (read without them, held-out Japanese answers lost 9
        of 31 sentences). 1 where the judge has nothing to read: a sentence without content terms (it claims nothing
        the lexical test could check either), or fewer than two passages in the sentence's script (no round to weigh
        words against; a passage in the other script could not match them, and scored apart it would pass all)."""
        passages = self.cjk if mostly_cjk(sentence) else self.latin
        if len(passages) < MIN_ROUND or not terms(sentence):
            return 1.0
        return max(judge_round(self.model, sentence, passages))


@dataclass(frozen=True, slots=True)
class Verdict:
    """One sentence's fate: passed (``reason`` None), or withheld and why."""

    reason: WithholdReason | None
    missing: tuple[str, ...] = ()


def judge_sentence(
    sentence: str, question: str, evidence: list[str], min_support: float, check: RoundCheck | None = None
) -> Verdict:
    """Whether one sentence (its citations already cleaned) may be sent."""
    if NOT_IN_CONTEXT in sentence:
        return Verdict("declined")
    if states_nothing(sentence):
        return Verdict("states_nothing")
    support = lexical_support(sentence, question, evidence)
    missing = dict.fromkeys((*support.missing_numbers, *support.missing))  # a number is a term too: once each
    if support.supported(min_support) and (check is None or check.passes(sentence)):
        return Verdict(None)
    # Withheld by either test, it is a doubt the corrective pipeline's critic may clear; its missing terms are what
    # the lexical test found absent (the round check withholds a sentence whose few absent terms are its claim).
    return Verdict("unsupported", tuple(missing)[:MAX_MISSING])


@dataclass(frozen=True, slots=True)
class Judged:
    """One sentence of a generation and the gate's verdict on it (``withheld`` None: it was sent)."""

    index: int
    lead: str
    text: str
    withheld: Withhold | None


def joined(sentences: list[Judged]) -> str:
    """The answer the given sentences make, spaced as the model wrote them."""
    pieces = [s.lead + s.text for s in sentences]
    return "".join(pieces).lstrip()


@dataclass(slots=True)
class SentenceGate:
    """Feed it the generator's text; it returns the text cleared to send, sentence by sentence.

    ``passages``: how many numbered passages the prompt held (citations of others are dropped from a sentence);
    ``check``: the second test, after the lexical one (None: the lexical test alone).
    """

    question: str
    evidence: list[str]
    passages: int
    min_support: float
    check: RoundCheck | None = None
    withheld: list[Withhold] = field(default_factory=list)
    judged: list[Judged] = field(default_factory=list)  # every sentence after a leading decline, in order
    declined: bool = False
    _sent: list[str] = field(default_factory=list)
    _count: int = 0
    _splitter: SentenceSplitter = field(default_factory=SentenceSplitter)

    def feed(self, text: str) -> list[str]:
        return [piece for sentence in self._splitter.feed(text) if (piece := self._admit(sentence))]

    def close(self) -> list[str]:
        return [piece for sentence in self._splitter.close() if (piece := self._admit(sentence))]

    @property
    def text(self) -> str:
        """Every sentence sent so far, as the client received them."""
        return "".join(self._sent)

    def _admit(self, sentence: Sentence) -> str:
        index, self._count = self._count, self._count + 1
        text = drop_phantom_citations(sentence.text, self.passages)
        verdict = judge_sentence(text, self.question, self.evidence, self.min_support, self.check)
        if verdict.reason == "declined" and not self._sent:
            self.declined = True  # the model found no answer: the abstention, not a withheld sentence
            return ""
        if verdict.reason is not None:
            withheld = Withhold(index=index, sentence=text, reason=verdict.reason, missing=verdict.missing)
            self.withheld.append(withheld)
            self.judged.append(Judged(index, sentence.lead, text, withheld))
            return ""
        self.judged.append(Judged(index, sentence.lead, text, None))
        piece = (sentence.lead if self._sent else "") + text
        self._sent.append(piece)
        return piece
