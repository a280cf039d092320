"""Measure the round judge (:mod:`pipelines.shared.judge`) against the fast scorer it refines, both fitted by the
service's own code (:mod:`routes.calibration.fit`, what ``gateway.query.calibration`` ships for the embedder in use).

    python -m routes.offline.training.fit_judge --data-dir ../shared/data/dev [--encoder use|e5]

Rounds: each HotpotQA question with its 10 paragraphs (the 2 supporting ones answer), each answerable SQuAD v2
and JSQuAD question with its paragraph and 3 others of the article, and each written near-miss case
(``routes/data/near_miss_{en,ja}.json``) with its judged pages (``correct`` answers; ``ambiguous`` and
``incorrect`` do not). Every round also appears without its answering passages, so that a round where nothing
answers teaches the margins not to promote its best.

Measured out of sample: AUC per shared source by 5-fold cross-validation over questions; the near-miss sets
leave one domain out (a manual the fit never saw). Evaluator accuracy is CRAG's three actions per page against
the labels, at the CRAG thresholds the calibration fits for this encoder
(:func:`routes.calibration.fit.crag_thresholds`), the judge's scores put on the fast scorer's scale first
(:func:`routes.calibration.fit.judge_scale`). Prints the fitted ``JudgeModel``.

``--encoder e5`` reads multilingual-e5-small's cosines instead of USE's (questions on its ``query:`` side, pages on
``passage:``; vectors kept on disk, :mod:`routes.offline.training.encoders`); the fast scorer it refines is the one
fitted on the same encoder, as the service pairs them.
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
from sklearn.metrics import roc_auc_score

from pipelines.shared import JudgeModel, QueryScorer, RelevanceModel, judge_round
from routes.calibration import (
    SHARED_SOURCES,
    Embedded,
    Encoder,
    Page,
    Round,
    Table,
    build_table,
    crag_thresholds,
    fast_scores,
    fit_judge,
    fit_judge_script,
    fit_relevance,
    judge_of,
    judge_scale,
    logit,
    near_miss_rounds,
    out_of_sample,
    with_answerless,
)
from routes.offline.training.encoders import ENCODERS, VectorCache, encoder

NEAR_MISS = Path(__file__).resolve().parents[2] / "data"
SHARED = SHARED_SOURCES
RETRIEVED_K = 8  # the corrective route's k


def shared_rounds(data_dir: Path, seed: int = 0) -> Iterator[Round]:
    for item in json.loads((data_dir / "hotpotqa_train.json").read_text(encoding="utf-8")):
        gold = {title for title, _ in item["supporting_facts"]}
        pages = tuple(Page(title, "".join(sentences), float(title in gold)) for title, sentences in item["context"])
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
            negatives = [Page(article["title"], paragraphs[j], 0.0) for j in rng.sample(others, min(3, len(others)))]
            answer = Page(article["title"], paragraph["context"], 1.0)
            yield Round(source, source, "", qa["question"], (answer, *negatives))


def page_text(page: Page) -> str:
    """A page as the encoder reads it (the service's fit embeds the same text)."""
    return f"{page.title}\n{page.text}"


def all_rounds(data_dir: Path) -> list[Round]:
    """Every round the judge is fitted and measured on, with each round's copy without its answering pages."""
    return with_answerless([*shared_rounds(data_dir), *near_miss_rounds()])


@dataclass(frozen=True, slots=True)
class Measured:
    """The rounds tabulated on one encoder, with the fast scorer the service fits on them (``relevance``), its
    probability per page (``baseline``) and the CRAG thresholds the calibration fits on it."""

    t: Table
    relevance: RelevanceModel
    baseline: np.ndarray
    upper: float
    lower: float


def tabulate(rounds: list[Round], embeddings: Encoder) -> Table:
    """The rounds embedded and tabulated as the service's fit tabulates its calibration set."""
    embedded = Embedded(embeddings, [r.question for r in rounds], [page_text(p) for r in rounds for p in r.pages])
    return build_table(rounds, embedded)


def measure(rounds: list[Round], embeddings: Encoder, relevance: RelevanceModel | None = None) -> Measured:
    """``relevance``: the fast scorer to read these cosines with (another encoder's, to see what calibration is
    worth); by default the one the service fits on them."""
    t = tabulate(rounds, embeddings)
    model = relevance or fit_relevance(t)
    baseline = fast_scores(model, t)
    upper, lower = crag_thresholds(t, baseline)
    return Measured(t, model, baseline, upper, lower)


def out_of_sample_judge(m: Measured) -> tuple[np.ndarray, float]:
    """The judge's probabilities out of sample (:func:`routes.calibration.fit.out_of_sample`), put on the fast
    scorer's scale, and that scale."""
    after = out_of_sample(m.t)
    scale = judge_scale(m.t, m.baseline, after, m.lower)
    return np.asarray(1.0 / (1.0 + np.exp(-scale * logit(after)))), scale


def actions(p: np.ndarray, upper: float, lower: float) -> np.ndarray:
    return np.where(p >= upper, 1.0, np.where(p < lower, 0.0, 0.5))


def report(m: Measured, after: np.ndarray) -> None:
    t, baseline, upper, lower = m.t, m.baseline, m.upper, m.lower
    print("relevance AUC (answering page vs the others), before -> after")
    for source in SHARED:
        rows = t.source == source
        before_auc = roc_auc_score(t.label[rows] == 1.0, baseline[rows])
        print(f"  {source:<8} {before_auc:.3f} -> {roc_auc_score(t.label[rows] == 1.0, after[rows]):.3f}")
    print("near-miss evaluator accuracy (correct/ambiguous/incorrect per page), before -> after")
    for lang in ("en", "ja"):
        rows = (t.source == f"near_miss_{lang}") & ~t.answerless
        for kind in ["all", *sorted(set(t.kind[rows]))]:
            sel = rows if kind == "all" else rows & (t.kind == kind)
            b = (actions(baseline[sel], upper, lower) == t.label[sel]).mean()
            a = (actions(after[sel], upper, lower) == t.label[sel]).mean()
            print(f"  {lang} {kind:<13} n={sel.sum():>3} {b:.3f} -> {a:.3f}")
        answering = rows & (t.label == 1.0)
        wrong = rows & (t.label == 0.0)
        # Each line: which pages, and the score range that counts them (CRAG's action on them).
        for name, sel, low, high in (
            ("answering page judged correct", answering, upper, 1.1),
            ("answering page dropped (incorrect)", answering, -0.1, lower),
            ("wrong page judged correct", wrong, upper, 1.1),
            ("wrong page kept for the grader or beyond", wrong, lower, 1.1),
            ("pages sent to the LLM grader (band)", rows, lower, upper),
        ):
            share = [float(((p[sel] >= low) & (p[sel] < high)).mean()) for p in (baseline, after)]
            print(f"  {lang} {name:<42} {share[0]:.3f} -> {share[1]:.3f}")
    print("per shared source: answering page dropped (incorrect); in rounds with no answering page, a page kept")
    for source in SHARED:
        answering = (t.source == source) & ~t.answerless & (t.label == 1.0)
        none = (t.source == source) & t.answerless
        dropped = [float((p[answering] < lower).mean()) for p in (baseline, after)]
        kept = [float((p[none] >= lower).mean()) for p in (baseline, after)]
        print(f"  {source:<8} dropped {dropped[0]:.3f} -> {dropped[1]:.3f}; kept {kept[0]:.3f} -> {kept[1]:.3f}")
    for name, rows in (("shared", np.isin(t.source, SHARED)), ("near-miss", ~np.isin(t.source, SHARED))):
        sel = rows & t.answerless
        print(
            f"rounds with no answering page ({name}): a page judged correct "
            f"{(baseline[sel] >= upper).mean():.3f} -> {(after[sel] >= upper).mean():.3f}, kept for the grader "
            f"or beyond {(baseline[sel] >= lower).mean():.3f} -> {(after[sel] >= lower).mean():.3f}"
        )


def retrieved_rounds(m: Measured, scale: float, embeddings: Encoder, k: int = RETRIEVED_K) -> None:
    """The near-miss cases asked of their manual as the service would (every page of the language chunked with the
    gateway's chunker, the top ``k`` chunks by cosine), each manual's rounds judged by a model fitted without it:
    rounds shaped like serving rounds, not like the hand-judged pages the fit read."""
    from gateway.knowledge import Chunker  # deferred: the gateway's own chunker and settings
    from gateway.settings import ChunkingSettings
    from routes.corpus import CorpusTenant, SourceDocument

    chunking = ChunkingSettings()
    split = Chunker(chunking.size, chunking.overlap).split
    t, fast = m.t, m.relevance
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
                latin, cjk = fit_judge_script(t, rows & ~t.cjk, False), fit_judge_script(t, rows & t.cjk, True)
                judges[domain] = judge_of(latin, cjk, scale, fast)
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
                tally["confirmed"][column] += best >= m.upper
                tally["dropped"][column] += bool(answering) and best < m.lower
                tally["top"][column] += found[int(np.argmax(scores))].doc_id == case["answer_doc"]
                for p, s in zip(found, scores, strict=True):
                    if p.doc_id in wrong:
                        tally["wrong kept"][column] += s >= m.lower
                        tally["wrong confirmed"][column] += s >= m.upper
        n = len(raw["cases"])
        for name, (before, after) in tally.items():
            total = wrong_pages if name.startswith("wrong") else n
            print(f"  {lang} {name:<16} {before / total:.3f} -> {after / total:.3f}  (of {total})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, default=Path("../shared/data/dev"))
    parser.add_argument("--encoder", choices=ENCODERS, default="use", help="the dense encoder (default: USE)")
    args = parser.parse_args()
    embeddings = encoder(args.encoder, cache=VectorCache())
    m = measure(all_rounds(args.data_dir), embeddings)
    after, scale = out_of_sample_judge(m)
    print(f"CRAG thresholds fitted on this encoder: upper {m.upper:.4f}, lower {m.lower:.4f}")
    print(f"logit scale {scale:.4f} (the judge's {float(1 / (1 + np.exp(-logit(m.lower) / scale))):.3f} is lower)")
    report(m, after)
    retrieved_rounds(m, scale, embeddings)
    print(fit_judge(m.t, m.relevance, m.baseline, m.lower))


if __name__ == "__main__":
    main()
