"""``python -m gateway.query.calibration [--compare]``: fit (or load) the calibration for the configured embedder.

Everything that reads a cosine or a scorer's probability (the fast relevance scorer, the round judge, the grounding
floor, the CRAG and escalation thresholds, the semantic cache's and curation's similarity thresholds) is fitted for
the embedder in use (:mod:`routes.calibration`) and kept beside the router's artefact, under
``GATEWAY_ROUTER_CACHE_DIR``. The image build fits it for the default embedder (``python -m
gateway.query.router_artefact`` fits both); a gateway configured for another embedder fits it at its first start,
and refuses to start when it cannot (the embedder unreachable, say) rather than judge that embedder's cosines on
another's scale. ``--compare`` prints each fitted threshold beside the value the service used before they were
fitted (USE's).
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable
from pathlib import Path

import numpy as np
from langchain_core.embeddings import Embeddings

from gateway.cache import find_contrast
from gateway.errors import CalibrationUnavailableError
from gateway.providers import build_embeddings, embed_queries
from gateway.settings import Settings
from routes.calibration import Calibration, Vectors, artefact_path, load_or_fit

# The values the service used before they were fitted, all chosen under USE: what ``--compare`` sets the fitted
# ones beside (and the test of the USE fit checks them against). Not read by the service.
USE_VALUES = {
    "min_relevance": 0.18,
    "escalate_below": 0.12,
    "crag_upper": 0.5,
    "crag_lower": 0.2,
    "explore_floor": 0.12,
    "strip_threshold": 0.15,
    "semantic_threshold": 0.87,
    "gap_similarity": 0.75,
}


class EmbeddingsEncoder:
    """The embedder as the service calls it: questions as queries (a provider may embed a query differently from a
    passage: e5's ``query:`` prefix) through :func:`~gateway.providers.embeddings.embed_queries` (batched where the
    provider offers it); pages through ``embed_documents``."""

    def __init__(self, embeddings: Embeddings) -> None:
        self._embeddings = embeddings

    def queries(self, texts: list[str]) -> Vectors:
        return np.asarray(embed_queries(self._embeddings, texts), dtype=np.float32)

    def passages(self, texts: list[str]) -> Vectors:
        return np.asarray(self._embeddings.embed_documents(texts), dtype=np.float32)


def contrast_guard(a: str, b: str) -> bool:
    """Whether the semantic cache's contrast guard refuses to serve ``a``'s answer for ``b``."""
    return find_contrast(a, b) is not None


def calibration_path(settings: Settings) -> Path:
    return artefact_path(settings.router_artefact.cache_dir, settings.embeddings.fingerprint())


def load_calibration(settings: Settings, embeddings: Embeddings | Callable[[], Embeddings]) -> Calibration:
    """The calibration for these settings' embedder: its artefact, or fitted now (``embeddings`` may be a factory,
    called only then). Raises :class:`CalibrationUnavailableError`, saying why and what to run, when there is no
    artefact and the fit fails."""
    fingerprint = settings.embeddings.fingerprint()

    def encoder() -> EmbeddingsEncoder:
        return EmbeddingsEncoder(embeddings() if callable(embeddings) else embeddings)

    try:
        return load_or_fit(settings.router_artefact.cache_dir, fingerprint, encoder, contrast_guard)[0]
    except Exception as exc:  # whatever the embedder raised: the start must fail with the reason and the remedy
        raise CalibrationUnavailableError(
            f"no calibration for embedder {fingerprint!r} in {settings.router_artefact.cache_dir} "
            f"(GATEWAY_ROUTER_CACHE_DIR), and fitting it failed: {type(exc).__name__}: {exc}. The scorers and "
            "thresholds that read cosines are fitted for each embedder; make the embedder reachable and start again, "
            "or fit the calibration beforehand with `python -m gateway.query.calibration` (or "
            "`python -m gateway.query.router_artefact`, which fits the router too) with the same settings"
        ) from exc


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--compare", action="store_true", help="print the fitted thresholds beside USE's old values")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    settings = Settings()
    calibration = load_calibration(
        settings,
        lambda: build_embeddings(settings.embeddings, settings.embedding_endpoint.resolved(settings.llm_endpoint)),
    )
    if args.compare:
        print(f"{'threshold':<20} {'fitted':>8} {'USE before':>10}")
        for name, value in calibration.thresholds().items():
            print(f"{name:<20} {value:>8.4f} {USE_VALUES[name]:>10.4f}")
    print(calibration_path(settings))


if __name__ == "__main__":
    main()
