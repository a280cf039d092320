"""``python -m routes.offline.eval.semantic_cache [--pairs FILE] [--json OUT]``: calibrate the semantic cache.

Embeds every pair of ``routes/data/semantic_pairs.jsonl`` (beside the other calibration data: the service fits its
threshold on them for the embedder in use, :mod:`routes.calibration`) with the real multilingual USE model and reports,
for each threshold from 0.85 to 0.97 and per language, how many paraphrases would be served (should
hit) and how many contrast pairs would be wrongly served (must not hit), without and with the contrast
guard. The recommended threshold is the one with no guarded contrast hit, even 0.02 below it
(``--margin``), and the best guarded paraphrase rate (ties: the higher, safer threshold). It then
replays the pairs through a real ``SemanticCache`` (LSH buckets included) at that threshold, so
bucket recall is measured too.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from gateway.cache import MemoryBackend, SemanticCache, SimilarityThreshold, find_contrast
from gateway.providers import USEEmbeddings
from gateway.settings import SemanticCacheSettings
from pipelines.shared import Visibility

THRESHOLDS = [round(0.85 + 0.01 * i, 2) for i in range(13)]
LANGS = ("en", "ja")


@dataclass(frozen=True, slots=True)
class Pair:
    kind: str  # "paraphrase" (should hit) or "contrast" (must not hit)
    lang: str
    category: str
    a: str
    b: str
    similarity: float = 0.0
    rejected_by: str | None = None  # the guard rule that refuses it, if any


def load_pairs(path: Path | None = None) -> list[Pair]:
    text = (
        path.read_text(encoding="utf-8")
        if path
        else resources.files("routes").joinpath("data/semantic_pairs.jsonl").read_text(encoding="utf-8")
    )
    return [Pair(**json.loads(line)) for line in text.splitlines() if line.strip()]


def score(pairs: list[Pair], embed: Callable[[list[str]], np.ndarray]) -> list[Pair]:
    """Cosine of each pair, both texts embedded as questions by ``embed`` (``USEEmbeddings.embed_array``, another
    encoder's query side), and the guard's verdict on it."""
    left, right = embed([p.a for p in pairs]), embed([p.b for p in pairs])
    sims = (left * right).sum(axis=1) / (np.linalg.norm(left, axis=1) * np.linalg.norm(right, axis=1))
    scored = []
    for pair, sim in zip(pairs, sims, strict=True):
        contrast = find_contrast(pair.a, pair.b)
        scored.append(replace(pair, similarity=float(sim), rejected_by=contrast.rule if contrast else None))
    return scored


def rates(pairs: list[Pair], threshold: float) -> dict[str, dict[str, float]]:
    """Per language: share of paraphrases / contrasts at or above ``threshold``, without and with the guard."""
    table: dict[str, dict[str, float]] = {}
    for lang in (*LANGS, "all"):
        chosen = [p for p in pairs if lang in ("all", p.lang)]
        row = {}
        for kind in ("paraphrase", "contrast"):
            group = [p for p in chosen if p.kind == kind]
            above = [p for p in group if p.similarity >= threshold]
            row[kind] = len(above) / max(len(group), 1)
            row[f"{kind}+guard"] = sum(p.rejected_by is None for p in above) / max(len(group), 1)
        table[lang] = row
    return table


def _guarded_contrast_hits(pairs: list[Pair], threshold: float) -> int:
    return sum(p.kind == "contrast" and p.similarity >= threshold and p.rejected_by is None for p in pairs)


def recommend(pairs: list[Pair], margin: float = 0.0) -> float:
    """Best guarded paraphrase rate among thresholds with no guarded contrast hit even ``margin`` lower.

    The margin matters because the guard was written against these very pairs and because some contrasts
    (same topic, different question) have no lexical marker at all: only the threshold keeps them out.
    """
    safe = [t for t in THRESHOLDS if _guarded_contrast_hits(pairs, t - margin) == 0]
    if not safe:
        return THRESHOLDS[-1]
    guarded = {t: rates(pairs, t)["all"]["paraphrase+guard"] for t in safe}
    best = max(guarded.values())
    return max(t for t, rate in guarded.items() if rate == best)


def closest_unguarded(pairs: list[Pair]) -> Pair | None:
    """The most similar contrast pair the guard lets through: the threshold alone must stay above it."""
    passed = [p for p in pairs if p.kind == "contrast" and p.rejected_by is None]
    return max(passed, key=lambda p: p.similarity, default=None)


# An offline replay of the cache's matching: one reader who sees everything.
EVERYTHING = Visibility.everything()


async def replay(pairs: list[Pair], embeddings: USEEmbeddings, threshold: float) -> dict[str, Any]:
    """Every ``a`` stored in one cache, every ``b`` looked up: LSH recall and cross-pair interference count."""
    cache = SemanticCache(
        SemanticCacheSettings(), MemoryBackend(), embeddings, threshold=SimilarityThreshold(threshold)
    )
    for pair in pairs:
        await cache.store("eval", 1, pair.a, None, pair.a.encode(), visibility=EVERYTHING)
    served: Counter[str] = Counter()
    wrong: list[str] = []
    for pair in pairs:
        hit = await cache.lookup("eval", 1, pair.b, visibility=EVERYTHING)
        if hit is None or hit.matched_query == pair.b:
            continue
        served[f"{pair.kind}:{pair.lang}"] += 1
        if pair.kind == "contrast":
            wrong.append(f"{pair.b!r} served the answer of {hit.matched_query!r} ({hit.similarity})")
    return {"served": dict(served), "false_hits": wrong, "mean_candidates": cache.stats.candidates / len(pairs)}


def _pct(value: float) -> str:
    return f"{value * 100:5.1f}%"


def print_report(pairs: list[Pair], chosen: float, strict: float, margin: float, replayed: dict[str, Any]) -> None:
    counts = Counter((p.kind, p.lang) for p in pairs)
    print(f"pairs: {dict(sorted((f'{k}:{lang}', n) for (k, lang), n in counts.items()))}")
    print("\nparaphrase = share served (higher is better); contrast = share wrongly served (must be 0); +g = guard on")
    header = "thresh |" + "|".join(f" {lang}: para  para+g contra contra+g " for lang in (*LANGS, "all"))
    print(header + "\n" + "-" * len(header))
    for t in THRESHOLDS:
        table = rates(pairs, t)
        cells = [
            " ".join(_pct(table[lang][k]) for k in ("paraphrase", "paraphrase+guard", "contrast", "contrast+guard"))
            for lang in (*LANGS, "all")
        ]
        print(f" {t:.2f}  |" + "|".join(f" {c} " for c in cells) + (" <- recommended" if t == chosen else ""))
    print(f"\nrecommended threshold: {chosen:.2f} with a {margin:.2f} safety margin, {strict:.2f} without one")
    if (closest := closest_unguarded(pairs)) is not None:
        print(f"closest contrast the guard lets through ({closest.category}, {closest.similarity:.3f}): ", end="")
        print(f"{closest.a!r} / {closest.b!r}")
    reached = [p for p in pairs if p.kind == "contrast" and p.similarity >= chosen]
    by_rule = Counter(f"{p.category} -> {p.rejected_by}" for p in reached)
    print(f"contrast pairs at or above {chosen:.2f}: {len(reached)}, refused by: {dict(sorted(by_rule.items()))}")
    refused = [p for p in pairs if p.kind == "paraphrase" and p.similarity >= chosen and p.rejected_by]
    for p in refused:
        print(f"  paraphrase refused by {p.rejected_by} ({p.similarity:.3f}): {p.a!r} / {p.b!r}")
    print(f"\nreplay through SemanticCache at {chosen:.2f}: served {replayed['served']}, ", end="")
    print(f"mean candidates fetched per lookup {replayed['mean_candidates']:.1f}")
    for line in replayed["false_hits"]:
        print(f"  FALSE HIT: {line}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--pairs", type=Path, help="a JSONL file of pairs (default: the packaged set)")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument("--margin", type=float, default=0.02, help="safety margin below the threshold (0.02)")
    args = parser.parse_args(argv)
    embeddings = USEEmbeddings()
    pairs = score(load_pairs(args.pairs), embeddings.embed_array)
    chosen, strict = recommend(pairs, args.margin), recommend(pairs)
    replayed = asyncio.run(replay(pairs, embeddings, chosen))
    print_report(pairs, chosen, strict, args.margin, replayed)
    if args.json:
        figures = {
            "recommended": chosen,
            "recommended_without_margin": strict,
            "rates": {str(t): rates(pairs, t) for t in THRESHOLDS},
            "replay": replayed,
        }
        args.json.write_text(json.dumps(figures, ensure_ascii=False, indent=2), encoding="utf-8")
    return 1 if replayed["false_hits"] else 0


if __name__ == "__main__":
    sys.exit(main())
