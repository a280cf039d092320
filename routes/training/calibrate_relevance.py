"""Fit the fast relevance scorer and show how the CRAG thresholds trade precision for recall.

    python -m routes.training.calibrate_relevance --data-dir ../shared/data/dev

Pairs: every HotpotQA question with its 10 context paragraphs (the 2 supporting titles relevant,
8 distractors not) and every answerable SQuAD v2 question with its paragraph (relevant) and 3 other
paragraphs of the article (not). Prints the fitted coefficients (copied into ``RelevanceModel``),
cross-validated AUC, and precision/recall at candidate thresholds, from which ``upper`` (0.5:
~74% precision) and ``lower`` (0.2: keeps ~74% of relevant passages out of "Incorrect") were chosen.
Needs scikit-learn (a runtime dependency already) and the shared data, not the service. ``--encoder e5`` fits
on multilingual-e5-small's cosines instead of USE's (vectors kept on disk, :mod:`routes.training.encoders`).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import cross_val_predict

from pipelines.shared.relevance import RelevanceModel, overlap
from pipelines.shared.support import terms
from routes.training.encoders import ENCODERS, Encoder, VectorCache, encoder
from routes.training.fit_judge import shared_rounds

Pair = tuple[str, str, str, int, str]  # question, title, text, label, source
SOURCES = ("hotpotqa", "squad", "jsquad")


def pairs(data_dir: Path, seed: int = 0) -> list[Pair]:
    """The judge's shared rounds (:func:`routes.training.fit_judge.shared_rounds`) as pairs: each HotpotQA question
    with its 10 paragraphs, each answerable SQuAD v2 / JSQuAD question with its paragraph and 3 other paragraphs
    of the article (same topic, so they share the question's words the way a retriever's distractors do)."""
    return [
        (r.question, title, text, int(label), r.source)
        for r in shared_rounds(data_dir, seed)
        for title, text, label in r.pages
    ]


def features(rows: list[Pair], embeddings: Encoder) -> np.ndarray:
    # A question recurs with each of its paragraphs (10 for HotpotQA, 4 for SQuAD): embed it once.
    unique = list(dict.fromkeys(r[0] for r in rows))
    index = {question: i for i, question in enumerate(unique)}
    questions = embeddings.queries(unique)[[index[r[0]] for r in rows]]
    passages = embeddings.passages([f"{r[1]}\n{r[2]}" for r in rows])
    cosine = (questions * passages).sum(axis=1)
    query_terms = [terms(r[0]) for r in rows]
    text_overlap = [overlap(q, r[2]) for q, r in zip(query_terms, rows, strict=True)]
    title_overlap = [overlap(q, r[1]) for q, r in zip(query_terms, rows, strict=True)]
    return np.column_stack([cosine, np.asarray(text_overlap), np.asarray(title_overlap)])


def report(label: str, x: np.ndarray, y: np.ndarray, source: np.ndarray) -> LogisticRegression:
    """Cross-validated AUC per feature set and source, the fit, and precision/recall per threshold."""
    print(f"[{label}] pairs={len(y)} relevant={int(y.sum())}")
    sets = [("cosine", [0]), ("cosine+overlap", [0, 1]), ("cosine+overlap+title", [0, 1, 2])][: x.shape[1]]
    for name, columns in sets:
        p = cross_val_predict(LogisticRegression(), x[:, columns], y, cv=5, method="predict_proba")[:, 1]
        per_source = " ".join(
            f"{s}={roc_auc_score(y[source == s], p[source == s]):.3f}" for s in SOURCES if (source == s).any()
        )
        print(f"{name:<22} AUC={roc_auc_score(y, p):.3f} {per_source}")
    model = LogisticRegression().fit(x, y)
    probability = model.predict_proba(x)[:, 1]
    print("threshold  precision  recall(kept above)")
    for threshold in (0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7):
        above = probability >= threshold
        precision = y[above].mean() if above.any() else float("nan")
        print(f"{threshold:>9.2f}  {precision:>9.3f}  {(above & (y == 1)).sum() / y.sum():>6.3f}")
    return model


LATIN_FEATURES = [0, 1, 2]  # cosine, overlap, title overlap
CJK_COLUMNS = [0, 1]  # a JSQuAD question and its negatives share the article's title: the title says nothing there


def fitted(x: np.ndarray, y: np.ndarray, source: np.ndarray) -> RelevanceModel:
    """The three fits (Latin, across scripts, Japanese) as the service's ``RelevanceModel``."""
    latin = source != "jsquad"
    model = LogisticRegression().fit(x[latin], y[latin])
    cjk = LogisticRegression().fit(x[~latin][:, CJK_COLUMNS], y[~latin])
    cross = LogisticRegression().fit(x[latin][:, [0]], y[latin])
    return RelevanceModel(
        intercept=float(model.intercept_[0]),
        w_cosine=float(model.coef_[0][0]),
        w_overlap=float(model.coef_[0][1]),
        w_title=float(model.coef_[0][2]),
        cross_intercept=float(cross.intercept_[0]),
        cross_w_cosine=float(cross.coef_[0][0]),
        cjk_intercept=float(cjk.intercept_[0]),
        cjk_w_cosine=float(cjk.coef_[0][0]),
        cjk_w_overlap=float(cjk.coef_[0][1]),
    )


@dataclass(frozen=True)
class PairTable:
    """Every pair's features, label, source and question number (the unit a fold keeps whole)."""

    x: np.ndarray
    y: np.ndarray
    source: np.ndarray
    question: np.ndarray


def training_set(data_dir: Path, embeddings: Encoder) -> PairTable:
    rows = pairs(data_dir)
    number = {q: i for i, q in enumerate(dict.fromkeys(r[0] for r in rows))}
    return PairTable(
        features(rows, embeddings),
        np.asarray([r[3] for r in rows]),
        np.asarray([r[4] for r in rows]),
        np.asarray([number[r[0]] for r in rows]),
    )


def fit_relevance(data_dir: Path, embeddings: Encoder) -> RelevanceModel:
    """The fast scorer fitted on ``embeddings``' cosines: what the service would ship for that encoder."""
    t = training_set(data_dir, embeddings)
    return fitted(t.x, t.y, t.source)


def cross_validated(t: PairTable, folds: int = 5) -> np.ndarray:
    """Each pair's probability from a fit that never saw its question (folds by question, as
    ``routes.training.fit_judge`` folds them; the script's full model: Latin with the title, Japanese cosine and
    overlap), for AUC out of sample."""
    p = np.zeros(len(t.y))
    fold = t.question % folds
    for script, cols in ((t.source != "jsquad", LATIN_FEATURES), (t.source == "jsquad", CJK_COLUMNS)):
        for k in range(folds):
            train, test = script & (fold != k), script & (fold == k)
            model = LogisticRegression().fit(t.x[train][:, cols], t.y[train])
            p[test] = model.predict_proba(t.x[test][:, cols])[:, 1]
    return p


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, default=Path("../shared/data/dev"))
    parser.add_argument("--encoder", choices=ENCODERS, default="use", help="the dense encoder (default: USE)")
    args = parser.parse_args()
    t = training_set(args.data_dir, encoder(args.encoder, cache=VectorCache()))
    x, y, source = t.x, t.y, t.source
    latin = source != "jsquad"
    report("latin: hotpotqa+squad", x[latin], y[latin], source[latin])
    report("cjk: jsquad", x[~latin][:, CJK_COLUMNS], y[~latin], source[~latin])
    m = fitted(x, y, source)
    print(
        f"RelevanceModel(intercept={m.intercept:.4f}, w_cosine={m.w_cosine:.4f}, "
        f"w_overlap={m.w_overlap:.4f}, w_title={m.w_title:.4f}, "
        f"cross_intercept={m.cross_intercept:.4f}, cross_w_cosine={m.cross_w_cosine:.4f}, "
        f"cjk_intercept={m.cjk_intercept:.4f}, cjk_w_cosine={m.cjk_w_cosine:.4f}, "
        f"cjk_w_overlap={m.cjk_w_overlap:.4f})"
    )


if __name__ == "__main__":
    main()
