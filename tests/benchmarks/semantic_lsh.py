"""How many stored questions a semantic-cache lookup reads, per embedder, with the LSH hashing from the origin or
from the calibration's question centre.

    python -m tests.benchmarks.semantic_lsh [--encoders use,e5] [--pairs FILE]

One tenant's cache (a real ``SemanticCache`` over the in-process backend, the default LSH shape: 24 bands of 12
bits, 32 ids a bucket, 64 candidates a lookup) holds the router's training questions (``routes/data``, EN/JA, ~1,200)
and the ``a`` side of every semantic pair. Then every pair's ``b`` is looked up (paraphrases should be served,
contrasts must not be), and so is every calibration round's question, which the cache does not hold (a miss, the
common case). Per lookup: distinct ids the buckets named, and vectors fetched (at most the cap). A lookup whose
buckets name more ids than the cap drops some unread, possibly the true match, so the figures to read are the share
of lookups at the cap and whether paraphrases are still served.

The threshold is the embedder's calibrated one (``--threshold-use`` / ``--threshold-e5``, defaults the fitted values
in RESULTS.md), so only the hashing differs between the two rows of an embedder. The centre is the calibration's:
the mean unit vector of the calibration set's questions (:func:`routes.calibration.fit.query_centre`). Vectors are
read from the offline vector cache (``routes.offline.training.encoders``), so a rerun embeds nothing.
``--pairs`` looks up another pair set's instead of the calibration's (the stored questions and the centre stay the
service's): ``routes/offline/eval/data/semantic_pairs_heldout.jsonl`` is written apart from everything the threshold
and centre are fitted on (other topics: appliances, travel, software, cooking, insurance, transport, libraries,
science), 36 pairs a language. A figure-printing script, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import numpy as np

from gateway.cache import MemoryBackend, QueryCentre, SemanticCache, SimilarityThreshold
from gateway.settings import SemanticCacheSettings
from pipelines.shared import Visibility
from routes.calibration import load_calibration_set, query_centre, read_pairs
from routes.examples import load_examples
from routes.offline.training.encoders import EncoderName, VectorCache, encoder

EVERYTHING = Visibility.everything()
THRESHOLDS: dict[str, float] = {"use": 0.8706, "e5": 0.9753}


@dataclass
class Row:
    encoder: str
    hashing: str
    ids_seen: list[int]
    fetched: list[int]
    served: Counter[str]
    capped: int


async def run(name: EncoderName, centred: bool, threshold: float, cap: int, asked: Path | None) -> Row:
    data = load_calibration_set()
    # The centre is always the calibration's own (what the service hashes from); only the lookups may differ.
    fitted = data.pairs
    pairs = tuple(read_pairs(asked)) if asked is not None else fitted
    stored = list(dict.fromkeys([e.text for e in load_examples()] + [p.a for p in pairs]))
    held = set(stored)
    misses = [q for q in dict.fromkeys(r.question for r in data.rounds) if q not in held]
    lookups = [p.b for p in pairs] + misses
    enc = encoder(name, cache=VectorCache())
    centre_texts = list(
        dict.fromkeys([*(r.question for r in data.rounds), *(p.a for p in fitted), *(p.b for p in fitted)])
    )
    vectors = dict(zip(stored + lookups, enc.queries(stored + lookups), strict=True))
    unit = [v / np.linalg.norm(v) for v in enc.queries(centre_texts)]
    centre = QueryCentre.of(query_centre(unit)) if centred else QueryCentre()
    settings = SemanticCacheSettings(max_candidates=cap)
    cache = SemanticCache(
        settings,
        MemoryBackend(max_entries=10_000_000, max_bytes=1 << 33),
        threshold=SimilarityThreshold(threshold),
        centre=centre,
    )
    for text in stored:
        await cache.store("bench", 1, text, vectors[text], text.encode(), visibility=EVERYTHING)
    row = Row(name, "centre" if centred else "origin", [], [], Counter(), 0)
    kinds = [f"{p.kind}:{p.lang}" for p in pairs] + ["miss"] * len(misses)
    for text, kind in zip(lookups, kinds, strict=True):
        hit = await cache.lookup("bench", 1, text, vectors[text], visibility=EVERYTHING)
        row.ids_seen.append(cache.stats.last_ids_seen)
        row.fetched.append(cache.stats.last_candidates)
        row.capped += cache.stats.last_ids_seen > cap
        if hit is not None and hit.matched_query != text:
            row.served[kind] += 1
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--encoders", default="use,e5")
    parser.add_argument("--threshold-use", type=float, default=THRESHOLDS["use"])
    parser.add_argument("--threshold-e5", type=float, default=THRESHOLDS["e5"])
    parser.add_argument("--cap", type=int, default=SemanticCacheSettings().max_candidates)
    parser.add_argument("--pairs", type=Path, help="look up this pair set's pairs (JSON lines: kind, lang, a, b)")
    args = parser.parse_args(argv)
    thresholds = {"use": args.threshold_use, "e5": args.threshold_e5}
    pairs = tuple(read_pairs(args.pairs)) if args.pairs is not None else load_calibration_set().pairs
    totals = Counter(f"{p.kind}:{p.lang}" for p in pairs)
    print(f"pairs: {dict(sorted(totals.items()))}; cap {args.cap} candidates a lookup")
    print(
        "| encoder | hashing | ids named p50 / p95 / max | fetched mean | lookups over the cap | "
        "paraphrases served en / ja | contrasts served en / ja | misses served |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name in args.encoders.split(","):
        for centred in (False, True):
            row = asyncio.run(run(cast(EncoderName, name), centred, thresholds[name], args.cap, args.pairs))
            ids = sorted(row.ids_seen)
            p95 = ids[int(0.95 * (len(ids) - 1))]
            s = row.served
            print(
                f"| {row.encoder} | {row.hashing} | {statistics.median(ids):.0f} / {p95} / {ids[-1]} | "
                f"{statistics.fmean(row.fetched):.1f} | {row.capped} of {len(ids)} | "
                f"{s['paraphrase:en']} / {s['paraphrase:ja']} | {s['contrast:en']} / {s['contrast:ja']} | {s['miss']} |"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
