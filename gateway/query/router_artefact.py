"""``python -m gateway.query.router_artefact``: train the front router once and cache its artefact, and fit the
calibration (the scorers and thresholds that read cosines, :mod:`gateway.query.calibration`) beside it.

The container image runs this at build time, so pods start without training and without writing
to their read-only root filesystem: at start-up ``load_or_train`` finds the artefact under
``GATEWAY_ROUTER_CACHE_DIR``. A pod configured for another embedding model or other chunking trains
in memory instead (the router's training probes chunk and embed its tenants the way ingestion does), and fits its
calibration at first start.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
from langchain_core.embeddings import Embeddings

from gateway.knowledge.chunking import Chunker
from gateway.providers.embeddings import build_embeddings
from gateway.query.calibration import calibration_path, load_calibration
from gateway.settings import Settings
from routes.corpus import all_cases
from routes.knowledge_router import KnowledgeModel, artefact_path, load_or_train
from routes.logistic_router import EmbedTexts


def _chunking(settings: Settings) -> str:
    return f"c{settings.chunking.size}o{settings.chunking.overlap}"


def train_knowledge_router(settings: Settings, embed: EmbedTexts) -> KnowledgeModel:
    """Load (or train and cache) the knowledge-aware router for these settings."""
    split = Chunker(settings.chunking.size, settings.chunking.overlap).split
    directory, model = settings.router_artefact.cache_dir, settings.embeddings.model
    return load_or_train(directory, embed, model, split, _chunking(settings))


def router_version(settings: Settings) -> str | None:
    """The version of the router a gateway with these settings routes with (``FrontRouter.version``), for a process
    that has no app: the operator's recalibration command. It loads the artefact the replicas load; where there is
    none it trains as they would, building the embedding model only then. None with the LLM classifier."""
    if settings.router.classifier == "llm":
        return None
    built: list[Embeddings] = []

    def embed(texts: list[str]) -> np.ndarray:
        if not built:
            built.append(build_embeddings(settings.embeddings, settings.llm_endpoint))
        return np.asarray(built[0].embed_documents(texts), dtype=np.float32)

    return train_knowledge_router(settings, embed).version


def build_artefact(settings: Settings, embeddings: Embeddings) -> list[Path]:
    """Train (or reuse) the artefacts the app will look up for these settings (the router's and the calibration's);
    return their paths."""

    def embed(texts: list[str]) -> np.ndarray:
        return np.asarray(embeddings.embed_documents(texts), dtype=np.float32)

    train_knowledge_router(settings, embed)
    cases, chunking = all_cases(), _chunking(settings)
    directory, model = settings.router_artefact.cache_dir, settings.embeddings.model
    paths = [artefact_path(directory, cases, model, chunking, stage) for stage in ("retrieve", "spread")]
    load_calibration(settings, embeddings)
    paths.append(calibration_path(settings))
    missing = [path for path in paths if not path.is_file()]
    if missing:
        raise RuntimeError(f"artefacts were not written to {missing} (is the directory writable?)")
    return paths


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    settings = Settings()
    for path in build_artefact(settings, build_embeddings(settings.embeddings, settings.llm_endpoint)):
        print(path)


if __name__ == "__main__":
    main()
