"""The calibration fitted for USE and for multilingual-e5-small side by side: thresholds, fit time, relevance AUC.

    python -m tests.benchmarks.calibration_fit [--embedders use,e5]

Each embedder is fitted as the service fits it (:func:`routes.calibration.fit.fit_calibration` through
:class:`gateway.query.calibration.EmbeddingsEncoder`: questions through ``embed_queries``, batched where the provider
offers it, pages by ``embed_documents``). Vectors are kept on disk (``~/.cache/rag-gateway/bench-vectors``, by embedder,
side and text digest: :class:`routes.offline.training.encoders.VectorCache`), because e5 costs ~60 ms a page here: the
first run of an embedder is *cold* (every text embedded, the time a gateway's first start spends), later runs time the
fit alone. Prints each threshold beside the value the service used before it was fitted (USE's), and the in-sample
relevance AUC per shared source of the fast scorer and the round judge under each embedder.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

from langchain_core.embeddings import Embeddings

from gateway.providers.embeddings import build_embeddings
from gateway.query.calibration import USE_VALUES, EmbeddingsEncoder, contrast_guard
from gateway.settings import EmbeddingSettings
from routes.calibration.data import SHARED_SOURCES, load_calibration_set
from routes.calibration.fit import Fitted, Vectors, fit_calibration
from routes.offline.training.encoders import VectorCache


class DiskCachedEncoder:
    """The service's encoder, each text's vector kept on disk by side (query or passage) and digest
    (:class:`routes.offline.training.encoders.VectorCache`); counts and times what the cache did not hold."""

    def __init__(self, name: str, embeddings: Embeddings, cache: VectorCache) -> None:
        inner = EmbeddingsEncoder(embeddings)
        self.computed = 0
        self.seconds = 0.0
        self._queries = cache.cached(f"calibration-fit:{name}:query", self._timed(inner.queries))
        self._passages = cache.cached(f"calibration-fit:{name}:passage", self._timed(inner.passages))

    def _timed(self, embed: Callable[[list[str]], Vectors]) -> Callable[[list[str]], Vectors]:
        def run(texts: list[str]) -> Vectors:
            started = time.monotonic()
            vectors = embed(texts)
            self.seconds += time.monotonic() - started
            self.computed += len(texts)
            return vectors

        return run

    def queries(self, texts: list[str]) -> Vectors:
        return self._queries(texts)

    def passages(self, texts: list[str]) -> Vectors:
        return self._passages(texts)


def _embeddings(name: str) -> tuple[str, Embeddings]:
    """The fingerprint the service keys the embedder's calibration by, and the provider it builds."""
    settings = EmbeddingSettings.model_construct() if name == "use" else EmbeddingSettings(provider="e5")
    return settings.fingerprint(), build_embeddings(settings)


def fit(name: str) -> tuple[Fitted, DiskCachedEncoder, float]:
    fingerprint, embeddings = _embeddings(name)
    encoder = DiskCachedEncoder(fingerprint, embeddings, VectorCache())
    started = time.monotonic()
    fitted = fit_calibration(encoder, load_calibration_set(), fingerprint, contrast_guard)
    return fitted, encoder, time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--embedders", default="use,e5")
    args = parser.parse_args()
    names = args.embedders.split(",")
    results = {name: fit(name) for name in names}
    print(f"{'threshold':<20} {'USE before':>10} " + " ".join(f"{n:>10}" for n in names))
    for key, before in USE_VALUES.items():
        cells = " ".join(f"{results[n][0].calibration.thresholds()[key]:>10.4f}" for n in names)
        print(f"{key:<20} {before:>10.4f} {cells}")
    print()
    for name, (fitted, encoder, total) in results.items():
        cold = "cold" if encoder.computed else "vectors cached"
        print(
            f"{name}: fit {total:.1f} s ({cold}: {encoder.computed} texts embedded in {encoder.seconds:.1f} s, "
            f"{1000 * encoder.seconds / max(encoder.computed, 1):.1f} ms a text; of {int(fitted.report['texts'])})"
        )
    print("\nrelevance AUC in sample (answering page vs the round's others), fast scorer / round judge")
    print(f"{'source':<10} " + " ".join(f"{n:>15}" for n in names))
    for source in SHARED_SOURCES:
        cells = " ".join(
            f"{results[n][0].report[f'auc_fast_{source}']:>7.3f}/{results[n][0].report[f'auc_judge_{source}']:<7.3f}"
            for n in names
        )
        print(f"{source:<10} {cells}")


if __name__ == "__main__":
    main()
