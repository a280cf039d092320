"""Fit the calibration (:class:`routes.calibration.model.Calibration`) for one embedder, on the shipped calibration set.

The scorers are the offline fits the service used to copy into code, run here for the embedder in use: the fast
relevance scorer (three logistic regressions: Latin script over cosine and the query's terms found in the text and
the title, Japanese over cosine and term overlap, across scripts over the cosine alone), then the round judge (one
logistic regression per script over each page's features within its round, every round also without its answering
pages, its logits scaled onto the fast scorer's so the CRAG thresholds read both alike).

Every threshold is an *operating point*, a share of the calibration set's pages or pairs on one side of it, not a
cosine: an embedder whose cosines run higher gets a higher threshold that keeps the same share. Each target is the
share USE has at the value the service used before these were fitted (printed beside the fitted ones by
``python -m gateway.query.calibration --compare``), so under USE the fit reproduces those values; see
:data:`TARGETS` for why each.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score

from pipelines.shared import (
    CJK_FEATURES,
    FEATURES,
    JudgeModel,
    Passage,
    RelevanceModel,
    mostly_cjk,
    overlap,
    round_features,
    terms,
)
from routes.calibration.data import SHARED_SOURCES, CalibrationSet, Round
from routes.calibration.model import Calibration, calibration_key

logger = logging.getLogger(__name__)

Vectors = np.ndarray
# Whether the semantic cache's contrast guard refuses to serve one question's answer for the other (the gateway's
# guard: a contrast pair it refuses cannot be a false hit, whatever its cosine).
Guard = Callable[[str, str], bool]
BATCH = 32


class Encoder(Protocol):
    """The embedder in use, as the service calls it: questions as queries, pages as passages (e5 embeds the two
    differently)."""

    def queries(self, texts: list[str]) -> Vectors: ...

    def passages(self, texts: list[str]) -> Vectors: ...


@dataclass(frozen=True, slots=True)
class Targets:
    """Each threshold's operating point: a share of the calibration set.

    - ``min_relevance`` (a cosine floor; below it a passage never reaches the generator): the share of *answering*
      shared pages (HotpotQA supporting paragraphs, SQuAD / JSQuAD gold paragraphs, pooled) it drops. A floor that
      only removes what cannot be relevant is defined by how much relevant evidence it may lose.
    - ``crag_lower`` (every page below: Incorrect): the share of answering shared pages, pooled, scored below it by
      the fast scorer. CRAG's "Incorrect" discards the round, so its cost is the answers thrown away; the round judge
      is scaled to keep the same share.
    - ``crag_upper`` (a page at or above: Correct, no LLM grader): the share of *non-answering* shared pages at or
      above it. "Correct" skips the grader, so its cost is wrong pages confirmed; a false-confirm rate on negatives
      does not move with the sets' mix of positives, as a precision would.
    - ``escalate_below`` (single_hop escalates when every passage is below): the share of SQuAD's answering pages
      below it. It was chosen on SQuAD (a single-hop set), where a gold paragraph below it means a missed retrieval.
    - ``explore_floor`` (follow-up rounds grade their best page down to this): the share of HotpotQA's supporting
      pages below it. It exists for a second hop's page, which shares little with the question: HotpotQA's supporting
      pages are those second hops.
    - ``strip_threshold`` (knowledge refinement keeps strips at or above): the share of answering shared pages,
      pooled, below it (the strips are scored by the same fast scorer; the set has no strip labels).
    - ``semantic_threshold`` (the semantic cache serves a cached answer at or above this cosine): the share of the
      paraphrase pairs served, and never below the most similar contrast pair the guard lets through (a false hit
      serves another question's answer, which no recall pays for).
    - ``gap_similarity`` (open questions this similar form one gap): the share of paraphrase pairs joined: two wordings
      of one question are one gap.
    """

    min_relevance_dropped: float = 0.0305
    crag_lower_dropped: float = 0.131
    crag_upper_false_confirmed: float = 0.0246
    escalate_below_squad_dropped: float = 0.047
    explore_floor_hotpotqa_dropped: float = 0.097
    strip_threshold_dropped: float = 0.078
    semantic_paraphrase_served: float = 0.43
    gap_paraphrase_joined: float = 0.90


TARGETS = Targets()


@dataclass(frozen=True, slots=True)
class Fitted:
    calibration: Calibration
    # In-sample relevance AUC per shared source, fast scorer and round judge: how well this embedder's scorers
    # rank the answering pages (a fit that works but ranks at chance is still a poor embedder for the service).
    report: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0


def _unit(vectors: Vectors) -> Vectors:
    array = np.asarray(vectors, dtype=np.float64)
    norms = np.linalg.norm(array, axis=1, keepdims=True)
    return np.asarray(array / np.where(norms == 0, 1.0, norms))


class Embedded:
    """Every text the fit reads, embedded once, in batches, with progress in the log (texts so far / total)."""

    def __init__(self, encoder: Encoder, queries: Sequence[str], passages: Sequence[str]) -> None:
        unique_queries = list(dict.fromkeys(queries))
        unique_passages = list(dict.fromkeys(passages))
        total, done = len(unique_queries) + len(unique_passages), 0
        self.query: dict[str, np.ndarray] = {}
        self.passage: dict[str, np.ndarray] = {}
        for texts, embed, into in (
            (unique_queries, encoder.queries, self.query),
            (unique_passages, encoder.passages, self.passage),
        ):
            for start in range(0, len(texts), BATCH):
                batch = texts[start : start + BATCH]
                into.update(zip(batch, _unit(embed(batch)), strict=True))
                done += len(batch)
                if done == total or (done // BATCH) % 10 == 0:
                    logger.info("calibration: embedded %d / %d texts", done, total)


def _page_text(title: str, text: str) -> str:
    return f"{title}\n{text}"


def with_answerless(rounds: Sequence[Round]) -> list[Round]:
    """Every round also without its answering pages, so the judge's margins learn not to promote the best of a round
    where nothing answers."""
    extra = []
    for r in rounds:
        rest = tuple(page for page in r.pages if page.label < 1.0)
        if len(rest) >= 2:
            extra.append(Round(r.source, r.domain, r.kind, r.question, rest, answerless=True))
    return [*rounds, *extra]


@dataclass(slots=True)
class Table:
    x: np.ndarray  # judge features, FEATURES order
    cosine: np.ndarray
    overlap: np.ndarray
    title: np.ndarray
    label: np.ndarray
    cjk: np.ndarray
    source: np.ndarray
    domain: np.ndarray
    kind: np.ndarray
    answerless: np.ndarray
    question: np.ndarray


def build_table(rounds: Sequence[Round], embedded: Embedded) -> Table:
    """One row per page of every round: the judge's features, the fast scorer's inputs, the label, and where the page
    came from (what the folds and the per-source figures split by)."""
    numbers = {q: i for i, q in enumerate(dict.fromkeys(r.question for r in rounds))}
    rows: dict[str, list[object]] = {k: [] for k in Table.__dataclass_fields__}
    for r in rounds:
        vector = embedded.query[r.question]
        passages = [
            Passage(str(i), str(i), p.title, p.text, float(vector @ embedded.passage[_page_text(p.title, p.text)]))
            for i, p in enumerate(r.pages)
        ]
        query_terms = terms(r.question)
        cjk = mostly_cjk(r.question)
        for passage, features, page in zip(passages, round_features(r.question, passages), r.pages, strict=True):
            rows["x"].append([features[n] for n in FEATURES])
            rows["cosine"].append(passage.score)
            rows["overlap"].append(overlap(query_terms, passage.text))
            rows["title"].append(overlap(query_terms, passage.title))
            rows["label"].append(page.label)
            rows["cjk"].append(cjk)
            rows["source"].append(r.source)
            rows["domain"].append(r.domain)
            rows["kind"].append(r.kind)
            rows["answerless"].append(r.answerless)
            rows["question"].append(numbers[r.question])
    return Table(**{k: np.asarray(v) for k, v in rows.items()})


def select(t: Table, rows: np.ndarray) -> Table:
    """The table's ``rows`` alone (a boolean mask): a fold of it, one source."""
    return Table(**{name: getattr(t, name)[rows] for name in Table.__dataclass_fields__})


def _logistic(x: np.ndarray, y: np.ndarray) -> LogisticRegression:
    return LogisticRegression(max_iter=2000).fit(x, y)


def fit_relevance(t: Table) -> RelevanceModel:
    """The fast scorer, on the shared rounds as they are (not the answerless copies): Latin over cosine, overlap and
    title overlap; Japanese over cosine and overlap (a JSQuAD question and its negatives share the article's title,
    so the title says nothing there); across scripts, the cosine alone on the Latin pages."""
    shared = np.isin(t.source, SHARED_SOURCES) & ~t.answerless
    latin, cjk = shared & (t.source != "jsquad"), shared & (t.source == "jsquad")
    y = t.label == 1.0
    x_latin = np.column_stack([t.cosine, t.overlap, t.title])[latin]
    model = _logistic(x_latin, y[latin])
    cross = _logistic(t.cosine[latin][:, None], y[latin])
    japanese = _logistic(np.column_stack([t.cosine, t.overlap])[cjk], y[cjk])
    return RelevanceModel(
        intercept=float(model.intercept_[0]),
        w_cosine=float(model.coef_[0][0]),
        w_overlap=float(model.coef_[0][1]),
        w_title=float(model.coef_[0][2]),
        cross_intercept=float(cross.intercept_[0]),
        cross_w_cosine=float(cross.coef_[0][0]),
        cjk_intercept=float(japanese.intercept_[0]),
        cjk_w_cosine=float(japanese.coef_[0][0]),
        cjk_w_overlap=float(japanese.coef_[0][1]),
    )


def fast_scores(model: RelevanceModel, t: Table) -> np.ndarray:
    return np.asarray(
        [
            model.probability(float(c), float(o), float(ti), cjk=bool(k))
            for c, o, ti, k in zip(t.cosine, t.overlap, t.title, t.cjk, strict=True)
        ]
    )


def judge_columns(cjk: bool) -> list[int]:
    return [FEATURES.index(n) for n in (CJK_FEATURES if cjk else FEATURES)]


def fit_judge_script(t: Table, rows: np.ndarray, cjk: bool) -> LogisticRegression:
    return _logistic(t.x[rows][:, judge_columns(cjk)], t.label[rows] == 1.0)


def out_of_sample(t: Table) -> np.ndarray:
    """Every page scored by a judge that never saw its question (shared: 5 folds by question, a round and its copy
    without the answering pages on one side) or its manual (near-miss: one domain left out)."""
    scores = np.zeros(len(t.label))
    near_miss = ~np.isin(t.source, SHARED_SOURCES)
    fold = t.question % 5
    for cjk in (False, True):
        script = t.cjk == cjk
        for k in range(5):
            test = script & ~near_miss & (fold == k)
            if test.any():
                model = fit_judge_script(t, script & (fold != k), cjk)
                scores[test] = model.predict_proba(t.x[test][:, judge_columns(cjk)])[:, 1]
        for domain in np.unique(t.domain[near_miss & script]):
            test = near_miss & (t.domain == domain)
            model = fit_judge_script(t, script & (t.domain != domain), cjk)
            scores[test] = model.predict_proba(t.x[test][:, judge_columns(cjk)])[:, 1]
    return scores


def logit(p: float | np.ndarray) -> np.ndarray:
    clipped = np.clip(p, 1e-9, 1 - 1e-9)
    return np.asarray(np.log(clipped / (1 - clipped)))


def judge_scale(t: Table, baseline: np.ndarray, judged: np.ndarray, lower: float) -> float:
    """The factor on the judge's logit that puts it on the fast scorer's scale: at ``lower`` it keeps as many
    answering shared pages out of Incorrect as the fast scorer does (judged out of sample, so the factor is not
    fitted to pages the judge memorised); logit 0 (0.5) stays where it is."""
    answering = np.isin(t.source, SHARED_SOURCES) & ~t.answerless & (t.label == 1.0)
    kept = (baseline[answering] >= lower).mean()
    ranked = np.sort(judged[answering])[::-1]
    threshold = float(ranked[max(int(np.ceil(kept * answering.sum())) - 1, 0)])
    if not 0.0 < threshold < 0.5 or not 0.0 < lower < 0.5:
        # Both logits must be negative for the factor to keep the judge's order; otherwise the judge (or the fast
        # scorer) does not rank this embedder's answering pages well enough to be put on a common scale.
        raise ValueError(f"cannot scale the round judge onto the fast scorer: lower {lower:.3f}, judge {threshold:.3f}")
    return float(logit(lower) / logit(threshold))


def fit_judge(t: Table, relevance: RelevanceModel, baseline: np.ndarray, lower: float) -> JudgeModel:
    """The round judge on every page, its logit scaled onto the fast scorer's (``baseline``: the fast scorer's
    probabilities, ``lower``: CRAG's lower threshold on them)."""
    scale = judge_scale(t, baseline, out_of_sample(t), lower)
    return judge_of(fit_judge_script(t, ~t.cjk, False), fit_judge_script(t, t.cjk, True), scale, relevance)


def judge_of(latin: LogisticRegression, cjk: LogisticRegression, scale: float, relevance: RelevanceModel) -> JudgeModel:
    """The service's judge from the two scripts' regressions, their logits times ``scale``; ``relevance`` is the fast
    scorer it hands lone passages to."""
    return JudgeModel(
        latin_intercept=scale * float(latin.intercept_[0]),
        latin_weights=tuple(scale * float(w) for w in latin.coef_[0]),
        cjk_intercept=scale * float(cjk.intercept_[0]),
        cjk_weights=tuple(scale * float(w) for w in cjk.coef_[0]),
        relevance=relevance,
    )


def _below(values: np.ndarray, share: float) -> float:
    """The value below which ``share`` of ``values`` fall."""
    return float(np.quantile(values, share))


def _at_or_above(values: np.ndarray, share: float) -> float:
    """The value at or above which ``share`` of ``values`` are."""
    return float(np.quantile(values, 1.0 - share))


def judge_probabilities(judge: JudgeModel, t: Table) -> np.ndarray:
    rows = zip(t.x, t.cjk, strict=True)
    return np.asarray([judge.probability(dict(zip(FEATURES, row, strict=True)), cjk=bool(k)) for row, k in rows])


def crag_thresholds(t: Table, fast: np.ndarray, targets: Targets = TARGETS) -> tuple[float, float]:
    """CRAG's ``upper`` and ``lower`` on the fast scorer's probabilities ``fast``: the shares of wrong shared pages
    confirmed and of answering shared pages dropped that ``targets`` allow."""
    shared = np.isin(t.source, SHARED_SOURCES) & ~t.answerless
    answering, wrong = shared & (t.label == 1.0), shared & (t.label == 0.0)
    return (
        _at_or_above(fast[wrong], targets.crag_upper_false_confirmed),
        _below(fast[answering], targets.crag_lower_dropped),
    )


def query_centre(unit_vectors: Sequence[np.ndarray]) -> tuple[float, ...]:
    """The mean of unit question vectors: where this embedder's questions cluster (the semantic cache hashes from
    it). Empty for no vectors."""
    if not unit_vectors:
        return ()
    return tuple(float(x) for x in np.mean(np.stack(unit_vectors), axis=0))


def fit_calibration(
    encoder: Encoder, data: CalibrationSet, fingerprint: str, guard: Guard, targets: Targets = TARGETS
) -> Fitted:
    """Embed the calibration set with ``encoder`` and fit the scorers and every threshold for it.

    ``guard``: the semantic cache's contrast guard (True where it refuses a pair), which the semantic threshold
    is fitted beside."""
    started = time.monotonic()
    pairs = data.pairs
    embedded = Embedded(
        encoder,
        [*(r.question for r in data.rounds), *(p.a for p in pairs), *(p.b for p in pairs)],
        [_page_text(p.title, p.text) for r in data.rounds for p in r.pages],
    )
    t = build_table(with_answerless(data.rounds), embedded)
    relevance = fit_relevance(t)
    fast = fast_scores(relevance, t)
    shared = np.isin(t.source, SHARED_SOURCES) & ~t.answerless
    answering = shared & (t.label == 1.0)
    upper, lower = crag_thresholds(t, fast, targets)
    judge = fit_judge(t, relevance, fast, lower)

    cosines = {
        kind: np.asarray([float(embedded.query[p.a] @ embedded.query[p.b]) for p in pairs if p.kind == kind])
        for kind in ("paraphrase", "contrast")
    }
    let_through = [
        float(embedded.query[p.a] @ embedded.query[p.b]) for p in pairs if p.kind == "contrast" and not guard(p.a, p.b)
    ]
    # Served at ``similarity >= threshold``: strictly above the closest contrast the guard lets through.
    safe = float(np.nextafter(max(let_through, default=-1.0), np.inf))
    semantic = max(_at_or_above(cosines["paraphrase"], targets.semantic_paraphrase_served), safe)

    calibration = Calibration(
        relevance=relevance,
        judge=judge,
        min_relevance=_below(t.cosine[answering], targets.min_relevance_dropped),
        escalate_below=_below(fast[answering & (t.source == "squad")], targets.escalate_below_squad_dropped),
        crag_upper=upper,
        crag_lower=lower,
        explore_floor=_below(fast[answering & (t.source == "hotpotqa")], targets.explore_floor_hotpotqa_dropped),
        strip_threshold=_below(fast[answering], targets.strip_threshold_dropped),
        semantic_threshold=semantic,
        gap_similarity=_at_or_above(cosines["paraphrase"], targets.gap_paraphrase_joined),
        fingerprint=fingerprint,
        key=calibration_key(fingerprint),
        query_centre=query_centre(list(embedded.query.values())),
    )
    judged = judge_probabilities(judge, t)
    report = {}
    for source in SHARED_SOURCES:
        rows = shared & (t.source == source)
        report[f"auc_fast_{source}"] = float(roc_auc_score(t.label[rows] == 1.0, fast[rows]))
        report[f"auc_judge_{source}"] = float(roc_auc_score(t.label[rows] == 1.0, judged[rows]))
    report["texts"] = float(len(embedded.query) + len(embedded.passage))
    return Fitted(calibration, report, time.monotonic() - started)
