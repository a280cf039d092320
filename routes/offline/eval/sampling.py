"""Which questions an evaluation run asks: a slice by what plain RAG's first retrieval held, a seeded sample, and
samples no earlier run used."""

from __future__ import annotations

import argparse
import random

from routes.offline.eval.datasets import Question
from routes.offline.eval.runner import FirstRetrieval


def pick(
    pool: list[tuple[Question, FirstRetrieval]], where: str, limit: int, seed: int | None
) -> list[tuple[Question, FirstRetrieval]]:
    """The questions to run: filtered by what plain RAG's first top-k held, then sampled or cut.

    ``where="missed"`` selects the questions "where retrieval fails" (a gold passage is absent from
    the first top-k) before sampling, so a small run still measures exactly that slice.
    """
    if where != "all":
        pool = [(q, f) for q, f in pool if f.gold_found is not None and f.complete == (where == "complete")]
    if seed is not None:
        return random.Random(seed).sample(pool, min(limit or len(pool), len(pool)))
    return pool[:limit] if limit else pool


def unasked(
    pool: list[tuple[Question, FirstRetrieval]], where: str, earlier: list[tuple[int, int]]
) -> list[tuple[Question, FirstRetrieval]]:
    """``pool`` without the questions the earlier sampled runs ``(seed, limit)`` asked: they are picked again as those
    runs picked them, from the whole pool, so the rest is a sample no run has used."""
    asked = {q.id for seed, limit in earlier for q, _ in pick(pool, where, limit, seed)}
    return [(q, f) for q, f in pool if q.id not in asked]


def seed_and_limit(text: str) -> tuple[int, int]:
    seed, _, limit = text.partition(":")
    try:
        return int(seed), int(limit)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected SEED:N, got {text!r}") from exc
