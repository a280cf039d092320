"""Router report: per-class accuracy on the held-back split and classification latency.

    python -m routes.offline.training.evaluate                 # logistic only (no LLM needed)
    python -m routes.offline.training.evaluate --llm           # also the LLM classifier, against GATEWAY_LLM_BASE_URL

The logistic figure includes embedding the query, since that is what a request pays for routing
(the same vector is then reused for retrieval).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import numpy as np

from gateway.providers import USEEmbeddings, open_llm_client
from gateway.settings import Settings
from routes.examples import Example, load_examples
from routes.llm_router import LLMRouter
from routes.logistic_router import LogisticRouter, fit
from routes.types import ROUTES, Route

Classify = Callable[[str], Awaitable[Route]]


async def measure(name: str, classify: Classify, examples: list[Example]) -> dict[str, Any]:
    correct: Counter[str] = Counter()
    total: Counter[str] = Counter()
    confusion: Counter[tuple[str, str]] = Counter()
    latencies: list[float] = []
    by_lang_hits: Counter[str] = Counter()
    for example in examples:
        started = time.perf_counter()
        try:
            predicted: str = await classify(example.text)
            by_lang_hits[example.lang] += predicted == example.route
        except Exception as exc:  # a failed classification counts as wrong, and is shown
            predicted = f"error:{type(exc).__name__}"
        latencies.append((time.perf_counter() - started) * 1000)
        total[example.route] += 1
        correct[example.route] += predicted == example.route
        confusion[(example.route, predicted)] += 1
    per_class = {r: round(correct[r] / total[r], 3) for r in ROUTES if total[r]}
    return {
        "classifier": name,
        "n": len(examples),
        "accuracy": round(sum(correct.values()) / len(examples), 3),
        "per_class": per_class,
        "support": dict(total),
        "per_language": {
            lang: round(by_lang_hits[lang] / n, 3) for lang, n in Counter(e.lang for e in examples).items()
        },
        "latency_ms_p50": round(float(np.percentile(latencies, 50)), 2),
        "latency_ms_p95": round(float(np.percentile(latencies, 95)), 2),
        "confusion": {f"{gold}->{pred}": n for (gold, pred), n in sorted(confusion.items())},
    }


def print_report(report: dict[str, Any]) -> None:
    classes = " ".join(
        f"{r}={report['per_class'].get(r, float('nan')):.3f}(n={report['support'].get(r, 0)})" for r in ROUTES
    )
    print(
        f"{report['classifier']:>8}: accuracy={report['accuracy']:.3f} {classes} "
        f"p50={report['latency_ms_p50']}ms p95={report['latency_ms_p95']}ms per_language={report['per_language']}"
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--llm", action="store_true", help="also evaluate the LLM classifier")
    parser.add_argument("--limit", type=int, default=0, help="evaluate only the first N held-back examples")
    parser.add_argument("--out", type=Path, help="write the JSON report here")
    parser.add_argument("--batched", action="store_true", help="embed the queries concurrently, as served")
    args = parser.parse_args()

    examples = load_examples()
    train = [e for e in examples if e.split == "train"]
    test = [e for e in examples if e.split == "test"]
    if args.limit:
        test = test[: args.limit]
    embeddings = USEEmbeddings()
    router = LogisticRouter(fit(train, embeddings.embed_array))

    # --batched: the vectors a busy gateway computes, every held-back query embedded concurrently
    batched: dict[str, list[float]] = {}
    if args.batched:
        texts = [e.text for e in test]
        batched = dict(zip(texts, await asyncio.gather(*(embeddings.aembed_query(t) for t in texts)), strict=True))

    async def logistic(text: str) -> Route:
        vector = batched[text] if text in batched else embeddings.embed_query(text)
        return router.classify_vector(text, vector).route

    reports = [await measure("logistic", logistic, test)]
    if args.llm:
        settings = Settings()
        llm = open_llm_client(settings.llm, settings.llm_endpoint)
        llm_router = LLMRouter(llm)

        async def by_llm(text: str) -> Route:
            decision, _ = await llm_router.classify(text)
            return decision.route

        reports.append(await measure("llm", by_llm, test))
    for report in reports:
        print_report(report)
        print("          confusion:", report["confusion"])
    if args.out:
        args.out.write_text(json.dumps(reports, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
