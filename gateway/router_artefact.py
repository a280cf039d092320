"""``python -m gateway.router_artefact``: train the front router once and cache its artefact.

The container image runs this at build time, so pods start without training and without writing
to their read-only root filesystem: at start-up ``load_or_train`` finds the artefact under
``GATEWAY_ROUTER_CACHE_DIR``. A pod configured for another embedding model trains in memory instead.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
from langchain_core.embeddings import Embeddings

from gateway.providers.embeddings import build_embeddings
from gateway.settings import Settings
from routes.examples import load_examples
from routes.logistic_router import artefact_path, load_or_train


def build_artefact(settings: Settings, embeddings: Embeddings) -> Path:
    """Train (or reuse) the artefact the app will look up for these settings; return its path."""
    examples = [e for e in load_examples() if e.split == "train"]

    def embed(texts: list[str]) -> np.ndarray:
        return np.asarray(embeddings.embed_documents(texts), dtype=np.float32)

    directory, model = settings.router_artefact.cache_dir, settings.embeddings.model
    load_or_train(directory, examples, embed, model)
    path = artefact_path(directory, examples, model)
    if not path.is_file():
        raise RuntimeError(f"router artefact was not written to {path} (is the directory writable?)")
    return path


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    settings = Settings()
    print(build_artefact(settings, build_embeddings(settings.embeddings, settings.llm_endpoint)))


if __name__ == "__main__":
    main()
