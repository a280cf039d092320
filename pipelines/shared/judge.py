"""Whether each passage of a retrieval round answers the question, judged against the round's other passages.

The fast scorer (:mod:`pipelines.shared.relevance`) looks at one passage at a time, so a page about a
neighbouring case (changing plan mid-month, beside cancelling mid-month) that shares most of the question's
words scores as high as the page asked about. A reader tells them apart by the words that *differ* between
the candidates: "cancel" in the question, in one page and not the others, says more than "month", which all
of them have. The judge reads the round as a whole: besides each passage's cosine and word overlap (whole
text, title, best sentence, best two-sentence window), it weighs the question's terms by how few of the
round's passages hold them and scores each passage by its margin over the best of the others.

Fitted for the embedder in use at set-up (``routes.calibration``: logistic regression, its logits scaled onto the
fast scorer's; ``python -m routes.offline.training.fit_judge`` measures it on the shared dev data) on the shared rounds
and the written near-miss sets, each round also
without its answering passages, so the margins are fitted on rounds where nothing answers too. They still lift
such a round's best page more often than the fast scorer did, and HotpotQA's second-hop pages (which share
little with the question) are dropped more often: the measured figures, gains and losses, are in
``routes/offline/eval/README.md``. No multilingual cross-encoder ships inside a
package this service can install, so the judge is this model over features; the LLM grader still decides
what it leaves uncertain.
"""

from __future__ import annotations

import math
from collections.abc import Sequence, Set
from dataclasses import dataclass

from pipelines.shared.deps import Passage
from pipelines.shared.relevance import QueryScorer, RelevanceModel
from pipelines.shared.sentences import split_sentences
from pipelines.shared.support import mostly_cjk, terms

# Feature order: cosine, overlap, title overlap, best sentence, best two-sentence window, distinctive
# coverage, cosine margin, distinctive-coverage margin. Japanese drops the title (a JSQuAD question and its
# negatives share the article's title, so it cannot be fitted there).
FEATURES = ("cosine", "overlap", "title", "sentence", "window", "distinctive", "cosine_margin", "distinctive_margin")
CJK_FEATURES = tuple(name for name in FEATURES if name != "title")
# Training rounds hold 2 to 10 passages: a lone passage has no round to be read against.
MIN_ROUND = 2


@dataclass(frozen=True, slots=True)
class JudgeModel:
    """Fitted for the embedder in use at set-up (``routes.calibration``): its cosine and cosine-margin weights are on
    that embedder's scale, so there is no default set. On the fast scorer's scale (its logits scaled), so the policy's
    thresholds keep their meaning: at ``lower`` as many answering pages of the shared sets, pooled, kept out of
    Incorrect (not per set: HotpotQA's second hops are dropped more often)."""

    latin_intercept: float
    latin_weights: tuple[float, ...]
    cjk_intercept: float
    cjk_weights: tuple[float, ...]
    # What scores a passage with no round to read it in: one in the other script than the question (its words
    # cannot match, only the cosine speaks), a lone one, or any for a question without content words.
    relevance: RelevanceModel

    def probability(self, features: dict[str, float], *, cjk: bool) -> float:
        if cjk:
            z = self.cjk_intercept + sum(w * features[n] for w, n in zip(self.cjk_weights, CJK_FEATURES, strict=True))
        else:
            z = self.latin_intercept + sum(w * features[n] for w, n in zip(self.latin_weights, FEATURES, strict=True))
        return 1.0 / (1.0 + math.exp(-z))


def _share(query_terms: Set[str], found: Set[str]) -> float:
    return len(query_terms & found) / len(query_terms) if query_terms else 0.0


def _best_span(query_terms: Set[str], text: str) -> tuple[float, float]:
    """Overlap of the best sentence and of the best two consecutive sentences: the answer sits in one place."""
    found = [terms(s.text) for s in split_sentences(text) if s.text.strip()] or [terms(text)]
    single = max(_share(query_terms, f) for f in found)
    window = max(_share(query_terms, f | after) for f, after in zip(found, [*found[1:], set()], strict=True))
    return single, window


def round_features(query: str, passages: Sequence[Passage]) -> list[dict[str, float]]:
    """Each passage's features within its round (the margins compare it with the best of the others)."""
    query_terms = frozenset(terms(query))
    texts = [terms(p.text) for p in passages]
    titles = [terms(p.title) for p in passages]
    held = [text | title for text, title in zip(texts, titles, strict=True)]
    count = len(passages)
    # Fewer of the round's passages holding a term, more it tells them apart; a term none holds still counts
    # against them all (the question asks for something the round lacks).
    weight = {t: math.log(1 + count / (sum(t in h for h in held) + 0.5)) for t in query_terms}
    total = sum(weight.values()) or 1.0
    rows: list[dict[str, float]] = []
    for passage, text, title, words in zip(passages, texts, titles, held, strict=True):
        sentence, window = _best_span(query_terms, passage.text)
        rows.append(
            {
                "cosine": passage.score,
                "overlap": _share(query_terms, text),
                "title": _share(query_terms, title),
                "sentence": sentence,
                "window": window,
                "distinctive": sum(weight[t] for t in query_terms if t in words) / total,
            }
        )
    for index, row in enumerate(rows):
        others = rows[:index] + rows[index + 1 :]
        row["cosine_margin"] = row["cosine"] - max((o["cosine"] for o in others), default=row["cosine"])
        row["distinctive_margin"] = row["distinctive"] - max(
            (o["distinctive"] for o in others), default=row["distinctive"]
        )
    return rows


def judge_round(model: JudgeModel, query: str, passages: Sequence[Passage]) -> list[float]:
    """The probability that each passage answers ``query``, in the order given.

    The round is the passages in the question's script: one in the other script cannot match its words, and its
    cosine would set the others' margins, so it is scored on its cosine alone and left out. A round of fewer than
    ``MIN_ROUND`` such passages (the fit's smallest), or a question without content terms, gives nothing to
    compare: the fast scorer scores it passage by passage, as it scores cross-script ones.
    """
    scorer = QueryScorer.of(model.relevance, query)
    same = [i for i, p in enumerate(passages) if mostly_cjk(p.text) == scorer.cjk]
    if len(same) < MIN_ROUND or not scorer.terms:
        return [scorer.score(p.title, p.text, p.score) for p in passages]
    judged = round_features(query, [passages[i] for i in same])
    scores = {i: model.probability(features, cjk=scorer.cjk) for i, features in zip(same, judged, strict=True)}
    return [scores[i] if i in scores else scorer.score(p.title, p.text, p.score) for i, p in enumerate(passages)]
