"""Measure the fast relevance scorer and show how CRAG's thresholds trade precision for recall.

    python -m routes.offline.training.calibrate_relevance --data-dir ../shared/data/dev [--encoder use|e5]

Pairs: every HotpotQA question with its 10 context paragraphs (the 2 supporting titles relevant, 8 distractors not),
every answerable SQuAD v2 and JSQuAD question with its paragraph (relevant) and 3 other paragraphs of the article
(not): the round judge's shared rounds (:func:`routes.offline.training.fit_judge.shared_rounds`), from which the
service's calibration set is derived. The scorer is fitted by the service's own code (:func:`routes.calibration.fit.
fit_relevance`, what ``gateway.query.calibration`` ships for the embedder in use); this script prints its
coefficients, AUC per feature set (which feature earns its place), AUC out of sample by question folds, and precision
/ recall at candidate thresholds beside the CRAG thresholds the calibration fits. ``--encoder e5`` reads
multilingual-e5-small's cosines instead of USE's (vectors kept on disk, :mod:`routes.offline.training.encoders`).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import cross_val_predict

from pipelines.shared import RelevanceModel
from routes.calibration import SHARED_SOURCES, Encoder, Table, crag_thresholds, fast_scores, fit_relevance, select
from routes.offline.training.encoders import ENCODERS, VectorCache, encoder
from routes.offline.training.fit_judge import shared_rounds, tabulate


def training_set(data_dir: Path, embeddings: Encoder) -> Table:
    """Every shared page against its question, as the service's fit tabulates them."""
    return tabulate(list(shared_rounds(data_dir)), embeddings)


def features(t: Table) -> np.ndarray:
    """The fast scorer's inputs: cosine, the question's terms found in the text, in the title."""
    return np.column_stack([t.cosine, t.overlap, t.title])


def cross_validated(t: Table, folds: int = 5) -> np.ndarray:
    """Each pair's probability from the service's fit on the other folds (folds by question, as
    ``routes.offline.training.fit_judge`` folds them), for AUC out of sample."""
    p = np.zeros(len(t.label))
    fold = t.question % folds
    for k in range(folds):
        test = fold == k
        p[test] = fast_scores(fit_relevance(select(t, ~test)), select(t, test))
    return p


def ablation(label: str, t: Table, rows: np.ndarray) -> None:
    """AUC per feature set on ``rows`` (cross-validated, unfolded): what each feature adds."""
    x, y, source = features(t)[rows], t.label[rows] == 1.0, t.source[rows]
    print(f"[{label}] pairs={len(y)} relevant={int(y.sum())}")
    for name, columns in (("cosine", [0]), ("cosine+overlap", [0, 1]), ("cosine+overlap+title", [0, 1, 2])):
        p = cross_val_predict(LogisticRegression(), x[:, columns], y, cv=5, method="predict_proba")[:, 1]
        per_source = " ".join(
            f"{s}={roc_auc_score(y[source == s], p[source == s]):.3f}" for s in SHARED_SOURCES if (source == s).any()
        )
        print(f"{name:<22} AUC={roc_auc_score(y, p):.3f} {per_source}")


def report(t: Table, model: RelevanceModel) -> None:
    y = t.label == 1.0
    out = cross_validated(t)
    print(
        "out of sample (folds by question): "
        + " ".join(f"{s}={roc_auc_score(y[t.source == s], out[t.source == s]):.3f}" for s in SHARED_SOURCES)
    )
    probability = fast_scores(model, t)
    upper, lower = crag_thresholds(t, probability)
    print(f"the calibration's CRAG thresholds on this encoder: upper {upper:.4f}, lower {lower:.4f}")
    print("threshold  precision  recall(kept above)")
    for threshold in sorted({0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, round(lower, 4), round(upper, 4)}):
        above = probability >= threshold
        precision = y[above].mean() if above.any() else float("nan")
        print(f"{threshold:>9.4f}  {precision:>9.3f}  {(above & y).sum() / y.sum():>6.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, default=Path("../shared/data/dev"))
    parser.add_argument("--encoder", choices=ENCODERS, default="use", help="the dense encoder (default: USE)")
    args = parser.parse_args()
    t = training_set(args.data_dir, encoder(args.encoder, cache=VectorCache()))
    ablation("latin: hotpotqa+squad", t, t.source != "jsquad")
    # A JSQuAD question and its negatives share the article's title, so the title says nothing there: the service's
    # Japanese model is cosine and overlap (the full set is shown for comparison).
    ablation("cjk: jsquad", t, t.source == "jsquad")
    model = fit_relevance(t)
    print(model)
    report(t, model)


if __name__ == "__main__":
    main()
