"""Fit the fast relevance scorer and show how the CRAG thresholds trade precision for recall.

    python -m pipelines.corrective.calibrate --data-dir ../shared/data/dev

Pairs: every HotpotQA question with its 10 context paragraphs (the 2 supporting titles relevant,
8 distractors not) and every answerable SQuAD v2 question with its paragraph (relevant) and 3 other
paragraphs of the article (not). Prints the fitted coefficients (copied into ``RelevanceModel``),
cross-validated AUC, and precision/recall at candidate thresholds, from which ``upper`` (0.5:
~74% precision) and ``lower`` (0.2: keeps ~74% of relevant passages out of "Incorrect") were chosen.
Needs scikit-learn (a runtime dependency already) and the shared data, not the service.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import cross_val_predict

from gateway.providers.embeddings import USEEmbeddings
from pipelines.shared.relevance import overlap
from pipelines.shared.support import terms

Pair = tuple[str, str, str, int, str]  # question, title, text, label, source


def pairs(data_dir: Path, seed: int = 0) -> list[Pair]:
    rows: list[Pair] = []
    for item in json.loads((data_dir / "hotpotqa_train.json").read_text(encoding="utf-8")):
        gold = {title for title, _ in item["supporting_facts"]}
        for title, sentences in item["context"]:
            rows.append((item["question"], title, "".join(sentences), int(title in gold), "hotpotqa"))
    squad = json.loads((data_dir / "squad_v2_dev_normans.json").read_text(encoding="utf-8"))
    paragraphs = [(a["title"], p) for a in squad["data"] for p in a["paragraphs"]]
    rng = random.Random(seed)
    for index, (title, paragraph) in enumerate(paragraphs):
        others = [j for j in range(len(paragraphs)) if j != index]
        for qa in paragraph["qas"]:
            if qa.get("is_impossible"):
                continue
            rows.append((qa["question"], title, paragraph["context"], 1, "squad"))
            for j in rng.sample(others, min(3, len(others))):
                rows.append((qa["question"], title, paragraphs[j][1]["context"], 0, "squad"))
    return rows


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, default=Path("../shared/data/dev"))
    args = parser.parse_args()
    rows = pairs(args.data_dir)
    x = features(rows, USEEmbeddings())
    y = np.asarray([r[3] for r in rows])
    source = np.asarray([r[4] for r in rows])
    print(f"pairs={len(y)} relevant={int(y.sum())}")
    for name, columns in [("cosine", [0]), ("cosine+overlap", [0, 1]), ("cosine+overlap+title", [0, 1, 2])]:
        p = cross_val_predict(LogisticRegression(), x[:, columns], y, cv=5, method="predict_proba")[:, 1]
        per_source = " ".join(f"{s}={roc_auc_score(y[source == s], p[source == s]):.3f}" for s in ("hotpotqa", "squad"))
        print(f"{name:<22} AUC={roc_auc_score(y, p):.3f} {per_source}")
    model = LogisticRegression().fit(x, y)
    cross = LogisticRegression().fit(x[:, [0]], y)
    print(
        f"RelevanceModel(intercept={model.intercept_[0]:.4f}, w_cosine={model.coef_[0][0]:.4f}, "
        f"w_overlap={model.coef_[0][1]:.4f}, w_title={model.coef_[0][2]:.4f}, "
        f"cross_intercept={cross.intercept_[0]:.4f}, cross_w_cosine={cross.coef_[0][0]:.4f})"
    )
    probability = model.predict_proba(x)[:, 1]
    print("threshold  precision  recall(kept above)")
    for threshold in (0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7):
        above = probability >= threshold
        precision = y[above].mean() if above.any() else float("nan")
        print(f"{threshold:>9.2f}  {precision:>9.3f}  {(above & (y == 1)).sum() / y.sum():>6.3f}")


if __name__ == "__main__":
    main()
