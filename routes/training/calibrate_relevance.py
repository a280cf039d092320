"""Fit the fast relevance scorer and show how the CRAG thresholds trade precision for recall.

    python -m routes.training.calibrate_relevance --data-dir ../shared/data/dev

Pairs: every HotpotQA question with its 10 context paragraphs (the 2 supporting titles relevant,
8 distractors not) and every answerable SQuAD v2 question with its paragraph (relevant) and 3 other
paragraphs of the article (not). Prints the fitted coefficients (copied into ``RelevanceModel``),
cross-validated AUC, and precision/recall at candidate thresholds, from which ``upper`` (0.5:
~74% precision) and ``lower`` (0.2: keeps ~74% of relevant passages out of "Incorrect") were chosen.
Needs scikit-learn (a runtime dependency already) and the shared data, not the service.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import cross_val_predict

from gateway.providers.embeddings import USEEmbeddings
from pipelines.shared.relevance import overlap
from pipelines.shared.support import terms
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


def features(rows: list[Pair], embeddings: USEEmbeddings) -> np.ndarray:
    # A question recurs with each of its paragraphs (10 for HotpotQA, 4 for SQuAD): embed it once.
    unique = list(dict.fromkeys(r[0] for r in rows))
    index = {question: i for i, question in enumerate(unique)}
    questions = embeddings.embed_array(unique)[[index[r[0]] for r in rows]]
    passages = embeddings.embed_array([f"{r[1]}\n{r[2]}" for r in rows])
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, default=Path("../shared/data/dev"))
    args = parser.parse_args()
    embeddings = USEEmbeddings()
    rows = pairs(args.data_dir)
    x = features(rows, embeddings)
    y = np.asarray([r[3] for r in rows])
    source = np.asarray([r[4] for r in rows])
    latin = source != "jsquad"
    model = report("latin: hotpotqa+squad", x[latin], y[latin], source[latin])
    # A JSQuAD question and its negatives share the article's title, so the title feature says nothing
    # there (it fits a negative weight): the Japanese model is cosine and overlap.
    cjk = report("cjk: jsquad", x[~latin][:, [0, 1]], y[~latin], source[~latin])
    cross = LogisticRegression().fit(x[latin][:, [0]], y[latin])
    print(
        f"RelevanceModel(intercept={model.intercept_[0]:.4f}, w_cosine={model.coef_[0][0]:.4f}, "
        f"w_overlap={model.coef_[0][1]:.4f}, w_title={model.coef_[0][2]:.4f}, "
        f"cross_intercept={cross.intercept_[0]:.4f}, cross_w_cosine={cross.coef_[0][0]:.4f}, "
        f"cjk_intercept={cjk.intercept_[0]:.4f}, cjk_w_cosine={cjk.coef_[0][0]:.4f}, "
        f"cjk_w_overlap={cjk.coef_[0][1]:.4f})"
    )


if __name__ == "__main__":
    main()
