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

from gateway.knowledge import Chunker
from gateway.providers import build_embeddings, embed_queries
from gateway.query.calibration import calibration_path, load_calibration
from gateway.settings import Settings
from routes.corpus import all_cases
from routes.knowledge_router import KnowledgeModel, artefact_path, load_or_train
from routes.logistic_router import EmbedTexts


def _chunking(settings: Settings) -> str:
    return f"c{settings.chunking.size}o{settings.chunking.overlap}"


def train_knowledge_router(
    settings: Settings, embed: EmbedTexts, embed_queries: EmbedTexts | None = None
) -> KnowledgeModel:
    """Load (or train and cache) the knowledge-aware router for these settings: ``embed`` embeds the training
    tenants' passages, ``embed_queries`` the questions (as the gateway embeds a question: :func:`question_embedder`)."""
    split = Chunker(settings.chunking.size, settings.chunking.overlap).split
    directory, embedder = settings.router_artefact.cache_dir, settings.embeddings.fingerprint()
    return load_or_train(directory, embed, embedder, split, _chunking(settings), embed_queries)


def passage_embedder(embeddings: Embeddings) -> EmbedTexts:
    """Passages in bulk, as ingestion embeds them."""

    def embed(texts: list[str]) -> np.ndarray:
        return np.asarray(embeddings.embed_documents(texts), dtype=np.float32)

    return embed


def question_embedder(embeddings: Embeddings) -> EmbedTexts:
    """Questions as a query is embedded (e5's "query: " prefix, a server's query input type), in batches where the
    provider takes many queries at once (:func:`~gateway.providers.embeddings.embed_queries`), else one by one."""

    def embed(texts: list[str]) -> np.ndarray:
        return np.asarray(embed_queries(embeddings, texts), dtype=np.float32).reshape(len(texts), -1)

    return embed


def settings_embeddings(settings: Settings) -> Embeddings:
    """The embedder these settings describe, for a process that has no app (no shared HTTP client)."""
    return build_embeddings(settings.embeddings, settings.embedding_endpoint.resolved(settings.llm_endpoint))


def router_version(settings: Settings) -> str | None:
    """The version of the router a gateway with these settings routes with (``FrontRouter.version``), for a process
    that has no app: the operator's recalibration command. It loads the artefact the replicas load; where there is
    none it trains as they would, building the embedding model only then. None with the LLM classifier."""
    if settings.router.classifier == "llm":
        return None
    built: list[Embeddings] = []

    def embedder() -> Embeddings:
        if not built:
            built.append(settings_embeddings(settings))
        return built[0]

    def passages(texts: list[str]) -> np.ndarray:
        return passage_embedder(embedder())(texts)

    def questions(texts: list[str]) -> np.ndarray:
        return question_embedder(embedder())(texts)

    return train_knowledge_router(settings, passages, questions).version


def build_artefact(settings: Settings, embeddings: Embeddings) -> list[Path]:
    """Train (or reuse) the artefacts the app will look up for these settings (the router's and the calibration's);
    return their paths."""
    train_knowledge_router(settings, passage_embedder(embeddings), question_embedder(embeddings))
    cases, chunking = all_cases(), _chunking(settings)
    directory, embedder = settings.router_artefact.cache_dir, settings.embeddings.fingerprint()
    paths = [artefact_path(directory, cases, embedder, chunking, stage) for stage in ("retrieve", "spread")]
    load_calibration(settings, embeddings)
    paths.append(calibration_path(settings))
    missing = [path for path in paths if not path.is_file()]
    if missing:
        raise RuntimeError(f"artefacts were not written to {missing} (is the directory writable?)")
    return paths


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    settings = Settings()
    for path in build_artefact(settings, settings_embeddings(settings)):
        print(path)


if __name__ == "__main__":
    main()
