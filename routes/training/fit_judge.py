"""Fit the round judge (:mod:`pipelines.shared.judge`) and measure it against the fast scorer it refines.

    python -m routes.training.fit_judge --data-dir ../shared/data/dev

Rounds: each HotpotQA question with its 10 paragraphs (the 2 supporting ones answer), each answerable SQuAD v2
and JSQuAD question with its paragraph and 3 others of the article, and each written near-miss case
(``routes/data/near_miss_{en,ja}.json``) with its judged pages (``correct`` answers; ``ambiguous`` and
``incorrect`` do not). Every round also appears without its answering passages, so that a round where nothing
answers teaches the margins not to promote its best.

Measured out of sample: AUC per shared source by 5-fold cross-validation over questions; the near-miss sets
leave one domain out (a manual the fit never saw). Evaluator accuracy is CRAG's three actions per page against
the labels, at the policy's thresholds (``upper`` 0.5, ``lower`` 0.2), the judge's scores put on the fast
scorer's scale first (:func:`scale_to_fast_scorer`). Prints the coefficients to copy into ``JudgeModel``.

``--encoder e5`` reads multilingual-e5-small's cosines instead of USE's (questions on its ``query:`` side, pages on
``passage:``; vectors kept on disk, :mod:`routes.training.encoders`); the fast scorer it refines is then the one
fitted on the same encoder (``routes.training.calibrate_relevance``), as the service would pair them.
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score

from pipelines.shared.deps import Passage
from pipelines.shared.judge import CJK_FEATURES, FEATURES, JudgeModel, judge_round, round_features
from pipelines.shared.relevance import QueryScorer, RelevanceModel, overlap
from pipelines.shared.support import mostly_cjk, terms
from routes.training.encoders import ENCODERS, Encoder, VectorCache, encoder

NEAR_MISS = Path(__file__).resolve().parents[1] / "data"
LABELS = {"correct": 1.0, "ambiguous": 0.5, "incorrect": 0.0}
SHARED = ("hotpotqa", "squad", "jsquad")
UPPER, LOWER = 0.5, 0.2
RETRIEVED_K = 8  # the corrective route's k


@dataclass(frozen=True, slots=True)
class Round:
    source: str  # hotpotqa, squad, jsquad, near_miss_en, near_miss_ja
    domain: str  # the unit left out together
    kind: str
    question: str
    pages: list[tuple[str, str, float]]  # title, text, label
    answerless: bool = False


def shared_rounds(data_dir: Path, seed: int = 0) -> Iterator[Round]:
    for item in json.loads((data_dir / "hotpotqa_train.json").read_text(encoding="utf-8")):
        gold = {title for title, _ in item["supporting_facts"]}
        pages = [(title, "".join(sentences), float(title in gold)) for title, sentences in item["context"]]
        yield Round("hotpotqa", "hotpotqa", item.get("type", ""), item["question"], pages)
    rng = random.Random(seed)
    for name, source in (("squad_v2_dev_normans.json", "squad"), ("jsquad_valid_sample.json", "jsquad")):
        for article in json.loads((data_dir / name).read_text(encoding="utf-8"))["data"]:
            yield from _article_rounds(article, source, rng)


def _article_rounds(article: dict[str, Any], source: str, rng: random.Random) -> Iterator[Round]:
    paragraphs = [p["context"] for p in article["paragraphs"]]
    for index, paragraph in enumerate(article["paragraphs"]):
        others = [j for j in range(len(paragraphs)) if j != index]
        for qa in paragraph["qas"]:
            if qa.get("is_impossible"):
                continue
            negatives = [(article["title"], paragraphs[j], 0.0) for j in rng.sample(others, min(3, len(others)))]
            yield Round(source, source, "", qa["question"], [(article["title"], paragraph["context"], 1.0), *negatives])


def near_miss_rounds(lang: str) -> Iterator[Round]:
    raw = json.loads((NEAR_MISS / f"near_miss_{lang}.json").read_text(encoding="utf-8"))
    documents = {d["id"]: d for d in raw["documents"]}
    for case in raw["cases"]:
        pages = [
            (documents[j["doc"]]["title"], documents[j["doc"]]["text"], LABELS[j["label"]]) for j in case["judgements"]
        ]
        yield Round(f"near_miss_{lang}", f"{lang}:{case['domain']}", case["kind"], case["question"], pages)


def with_answerless(rounds: list[Round]) -> list[Round]:
    extra = []
    for r in rounds:
        rest = [page for page in r.pages if page[2] < 1.0]
        if len(rest) >= 2:
            extra.append(Round(r.source, r.domain, r.kind, r.question, rest, answerless=True))
    return rounds + extra


@dataclass(slots=True)
class Table:
    """One row per page: the judge's features, the fast scorer's probability, the label and where it came from."""

    x: np.ndarray
    baseline: np.ndarray
    label: np.ndarray
    cjk: np.ndarray
    source: np.ndarray
    domain: np.ndarray
    kind: np.ndarray
    answerless: np.ndarray
    question: np.ndarray


def table(rounds: list[Round], embeddings: Encoder, relevance: RelevanceModel | None = None) -> Table:
    """``relevance``: the fast scorer the judge is measured against (the service's constants unless given)."""
    questions = list(dict.fromkeys(r.question for r in rounds))
    texts = list(dict.fromkeys(f"{title}\n{text}" for r in rounds for title, text, _ in r.pages))
    q_vectors = dict(zip(questions, embeddings.queries(questions), strict=True))
    p_vectors = dict(zip(texts, embeddings.passages(texts), strict=True))
    relevance = relevance or RelevanceModel()
    keys = ("x", "b", "y", "cjk", "src", "dom", "kind", "none", "question")
    number_of = {question: i for i, question in enumerate(questions)}
    rows: dict[str, list[Any]] = {k: [] for k in keys}
    for r in rounds:
        cjk = mostly_cjk(r.question)
        passages = [
            Passage(str(i), str(i), title, text, float(q_vectors[r.question] @ p_vectors[f"{title}\n{text}"]))
            for i, (title, text, _) in enumerate(r.pages)
        ]
        query_terms = terms(r.question)
        judged = round_features(r.question, passages)
        for passage, features, (_, _, label) in zip(passages, judged, r.pages, strict=True):
            rows["x"].append([features[n] for n in FEATURES])
            rows["b"].append(
                relevance.probability(
                    passage.score, overlap(query_terms, passage.text), overlap(query_terms, passage.title), cjk=cjk
                )
            )
            rows["y"].append(label)
            for key, value in (("cjk", cjk), ("src", r.source), ("dom", r.domain), ("kind", r.kind)):
                rows[key].append(value)
            rows["none"].append(r.answerless)
            rows["question"].append(number_of[r.question])
    return Table(*(np.asarray(rows[k]) for k in keys))


def columns(cjk: bool) -> list[int]:
    return [FEATURES.index(n) for n in (CJK_FEATURES if cjk else FEATURES)]


def fit(t: Table, rows: np.ndarray, cjk: bool) -> LogisticRegression:
    return LogisticRegression(max_iter=2000).fit(t.x[rows][:, columns(cjk)], t.label[rows] == 1.0)


def out_of_sample(t: Table) -> np.ndarray:
    """Every page scored by a model that never saw its question (shared) or its manual (near-miss)."""
    scores = np.zeros(len(t.label))
    near_miss = np.char.startswith(t.source.astype(str), "near_miss")
    # Folds by question: a round and its copy without the answering pages stay on one side.
    fold = t.question % 5
    for cjk in (False, True):
        script = t.cjk == cjk
        for k in range(5):
            test = script & ~near_miss & (fold == k)
            scores[test] = fit(t, script & (fold != k), cjk).predict_proba(t.x[test][:, columns(cjk)])[:, 1]
        for domain in np.unique(t.domain[near_miss & script]):
            test = near_miss & (t.domain == domain)
            scores[test] = fit(t, script & (t.domain != domain), cjk).predict_proba(t.x[test][:, columns(cjk)])[:, 1]
    return scores


def actions(p: np.ndarray) -> np.ndarray:
    return np.where(p >= UPPER, 1.0, np.where(p < LOWER, 0.0, 0.5))


def report(t: Table, after: np.ndarray) -> None:
    print("relevance AUC (answering page vs the others), before -> after")
    for source in SHARED:
        rows = t.source == source
        before_auc = roc_auc_score(t.label[rows] == 1.0, t.baseline[rows])
        print(f"  {source:<8} {before_auc:.3f} -> {roc_auc_score(t.label[rows] == 1.0, after[rows]):.3f}")
    print("near-miss evaluator accuracy (correct/ambiguous/incorrect per page), before -> after")
    for lang in ("en", "ja"):
        rows = (t.source == f"near_miss_{lang}") & ~t.answerless
        for kind in ["all", *sorted(set(t.kind[rows]))]:
            sel = rows if kind == "all" else rows & (t.kind == kind)
            b = (actions(t.baseline[sel]) == t.label[sel]).mean()
            a = (actions(after[sel]) == t.label[sel]).mean()
            print(f"  {lang} {kind:<13} n={sel.sum():>3} {b:.3f} -> {a:.3f}")
        answering = rows & (t.label == 1.0)
        wrong = rows & (t.label == 0.0)
        # Each line: which pages, and the score range that counts them (CRAG's action on them).
        for name, sel, low, high in (
            ("answering page judged correct", answering, UPPER, 1.1),
            ("answering page dropped (incorrect)", answering, -0.1, LOWER),
            ("wrong page judged correct", wrong, UPPER, 1.1),
            ("wrong page kept for the grader or beyond", wrong, LOWER, 1.1),
            ("pages sent to the LLM grader (band)", rows, LOWER, UPPER),
        ):
            share = [float(((p[sel] >= low) & (p[sel] < high)).mean()) for p in (t.baseline, after)]
            print(f"  {lang} {name:<42} {share[0]:.3f} -> {share[1]:.3f}")
    print("per shared source: answering page dropped (incorrect); in rounds with no answering page, a page kept")
    for source in SHARED:
        answering = (t.source == source) & ~t.answerless & (t.label == 1.0)
        none = (t.source == source) & t.answerless
        dropped = [float((p[answering] < LOWER).mean()) for p in (t.baseline, after)]
        kept = [float((p[none] >= LOWER).mean()) for p in (t.baseline, after)]
        print(f"  {source:<8} dropped {dropped[0]:.3f} -> {dropped[1]:.3f}; kept {kept[0]:.3f} -> {kept[1]:.3f}")
    for name, rows in (("shared", np.isin(t.source, SHARED)), ("near-miss", ~np.isin(t.source, SHARED))):
        sel = rows & t.answerless
        print(
            f"rounds with no answering page ({name}): a page judged correct "
            f"{(t.baseline[sel] >= UPPER).mean():.3f} -> {(after[sel] >= UPPER).mean():.3f}, kept for the grader "
            f"or beyond {(t.baseline[sel] >= LOWER).mean():.3f} -> {(after[sel] >= LOWER).mean():.3f}"
        )


def logit(p: np.ndarray | float) -> np.ndarray:
    clipped = np.clip(p, 1e-9, 1 - 1e-9)
    return np.asarray(np.log(clipped / (1 - clipped)))


def scale_to_fast_scorer(t: Table, after: np.ndarray) -> float:
    """The factor on the judge's logit that puts its scores on the fast scorer's scale, so the policy's thresholds
    mean what they meant: at ``lower`` the judge keeps as many answering shared-data pages out of Incorrect as
    the fast scorer did (the rest of its gain goes to dropping more wrong pages); ``upper`` (logit 0) stays where it
    is, where the judge already confirms more answering pages and fewer wrong ones. Chosen on the shared data only."""
    answering = np.isin(t.source, SHARED) & ~t.answerless & (t.label == 1.0)
    kept = (t.baseline[answering] >= LOWER).mean()
    ranked = np.sort(after[answering])[::-1]
    threshold = ranked[int(np.ceil(kept * answering.sum())) - 1]
    return float(logit(LOWER) / logit(threshold))


def judge_of(latin: LogisticRegression, cjk: LogisticRegression, scale: float) -> JudgeModel:
    return JudgeModel(
        latin_intercept=scale * float(latin.intercept_[0]),
        latin_weights=tuple(scale * float(w) for w in latin.coef_[0]),
        cjk_intercept=scale * float(cjk.intercept_[0]),
        cjk_weights=tuple(scale * float(w) for w in cjk.coef_[0]),
    )


def retrieved_rounds(
    t: Table, scale: float, embeddings: Encoder, k: int = RETRIEVED_K, fast: RelevanceModel | None = None
) -> None:
    """The near-miss cases asked of their manual as the service would (every page of the language chunked with the
    gateway's chunker, the top ``k`` chunks by cosine), each manual's rounds judged by a model fitted without it:
    rounds shaped like serving rounds, not like the hand-judged pages the fit read."""
    from gateway.knowledge.chunking import Chunker  # deferred: the gateway's own chunker and settings
    from gateway.settings import ChunkingSettings
    from routes.corpus import CorpusTenant, SourceDocument

    chunking = ChunkingSettings()
    split = Chunker(chunking.size, chunking.overlap).split
    fast = fast or RelevanceModel()
    print(f"near-miss cases against their whole manual, top {k} chunks: fast scorer -> round judge")
    for lang in ("en", "ja"):
        raw = json.loads((NEAR_MISS / f"near_miss_{lang}.json").read_text(encoding="utf-8"))
        docs = tuple(SourceDocument(d["id"], d["title"], d["text"]) for d in raw["documents"])
        tenant = CorpusTenant(f"near_miss_{lang}", docs, split)
        vectors = embeddings.queries([c["question"] for c in raw["cases"]])
        judges: dict[str, JudgeModel] = {}
        tally = {name: [0, 0] for name in ("confirmed", "dropped", "top", "wrong kept", "wrong confirmed")}
        wrong_pages = 0
        for case, vector in zip(raw["cases"], vectors, strict=True):
            domain = f"{lang}:{case['domain']}"
            if domain not in judges:
                rows = t.domain != domain
                judges[domain] = judge_of(fit(t, rows & ~t.cjk, False), fit(t, rows & t.cjk, True), scale)
            found = tenant.search(embeddings.passages, vector, k)
            scorer = QueryScorer.of(fast, case["question"])
            wrong = {j["doc"] for j in case["judgements"] if j["label"] == "incorrect"}
            wrong_pages += sum(p.doc_id in wrong for p in found)
            for column, scores in enumerate(
                (
                    [scorer.score(p.title, p.text, p.score) for p in found],
                    judge_round(judges[domain], case["question"], found),
                )
            ):
                answering = [s for p, s in zip(found, scores, strict=True) if p.doc_id == case["answer_doc"]]
                best = max(answering, default=0.0)
                tally["confirmed"][column] += best >= UPPER
                tally["dropped"][column] += bool(answering) and best < LOWER
                tally["top"][column] += found[int(np.argmax(scores))].doc_id == case["answer_doc"]
                for p, s in zip(found, scores, strict=True):
                    if p.doc_id in wrong:
                        tally["wrong kept"][column] += s >= LOWER
                        tally["wrong confirmed"][column] += s >= UPPER
        n = len(raw["cases"])
        for name, (before, after) in tally.items():
            total = wrong_pages if name.startswith("wrong") else n
            print(f"  {lang} {name:<16} {before / total:.3f} -> {after / total:.3f}  (of {total})")


def all_rounds(data_dir: Path) -> list[Round]:
    """Every round the judge is fitted and measured on, with each round's copy without its answering pages."""
    return with_answerless([*shared_rounds(data_dir), *near_miss_rounds("en"), *near_miss_rounds("ja")])


def judged(t: Table, model: JudgeModel) -> np.ndarray:
    """Every page of the table scored by a given judge (fixed constants, not a fit): the same features, read by
    :meth:`JudgeModel.probability`."""
    return np.asarray(
        [
            model.probability(dict(zip(FEATURES, row, strict=True)), cjk=bool(cjk))
            for row, cjk in zip(t.x, t.cjk, strict=True)
        ]
    )


def out_of_sample_judge(t: Table) -> np.ndarray:
    """The judge's probabilities out of sample (:func:`out_of_sample`), put on the fast scorer's scale."""
    after = out_of_sample(t)
    scale = scale_to_fast_scorer(t, after)
    return np.asarray(1.0 / (1.0 + np.exp(-scale * logit(after))))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, default=Path("../shared/data/dev"))
    parser.add_argument("--encoder", choices=ENCODERS, default="use", help="the dense encoder (default: USE)")
    args = parser.parse_args()
    rounds = all_rounds(args.data_dir)
    embeddings = encoder(args.encoder, cache=VectorCache())
    fast = None
    if args.encoder != "use":  # the service's constants are USE's: the fast scorer refitted on this encoder
        from routes.training.calibrate_relevance import fit_relevance  # deferred: imports this module

        fast = fit_relevance(args.data_dir, embeddings)
    t = table(rounds, embeddings, fast)
    after = out_of_sample(t)
    scale = scale_to_fast_scorer(t, after)
    print(f"logit scale {scale:.4f} (the judge's {float(1 / (1 + np.exp(-logit(LOWER) / scale))):.3f} is lower)")
    report(t, 1.0 / (1.0 + np.exp(-scale * logit(after))))
    retrieved_rounds(t, scale, embeddings, fast=fast)
    latin, cjk = fit(t, ~t.cjk, False), fit(t, t.cjk, True)
    print(
        f"JudgeModel(latin_intercept={scale * latin.intercept_[0]:.4f}, "
        f"latin_weights=({', '.join(f'{scale * w:.4f}' for w in latin.coef_[0])}), "
        f"cjk_intercept={scale * cjk.intercept_[0]:.4f}, "
        f"cjk_weights=({', '.join(f'{scale * w:.4f}' for w in cjk.coef_[0])}))"
    )


if __name__ == "__main__":
    main()
