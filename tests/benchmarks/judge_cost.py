"""What the round judge costs the evaluator: CPU per passage and per round at k = 8, start-up and model size.

    python -m tests.benchmarks.judge_cost [--rounds 200] [--repeat 5]

Rounds are real passages: the first 8 paragraphs of HotpotQA questions (English, ~600 characters each) and
JSQuAD questions with 7 other paragraphs of their article (Japanese). The passage scores (cosines) are fixed,
as the evaluator receives them from retrieval; the judge embeds nothing. Prints, for the judge and for the
per-passage fast scorer it replaces, the CPU milliseconds per round of 8 (p50/p95 over the rounds, best of
``--repeat``) and per passage; then the judge's import time and the size of its model.

A figure-printing script, not a test.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from pipelines.shared.deps import Passage
from pipelines.shared.judge import judge_round
from pipelines.shared.relevance import QueryScorer
from tests.calibration_support import use_calibration

K = 8


def rounds(data_dir: Path, count: int) -> list[tuple[str, list[Passage]]]:
    rng = random.Random(8)
    found: list[tuple[str, list[Passage]]] = []
    for item in json.loads((data_dir / "hotpotqa_train.json").read_text(encoding="utf-8"))[:count]:
        pages = [(title, "".join(sentences)) for title, sentences in item["context"]][:K]
        found.append((item["question"], [Passage(t, t, t, text, rng.random()) for t, text in pages]))
    articles = json.loads((data_dir / "jsquad_valid_sample.json").read_text(encoding="utf-8"))["data"]
    for article in articles:
        paragraphs = [p["context"] for p in article["paragraphs"]]
        for paragraph in article["paragraphs"]:
            if len(found) >= 2 * count or len(paragraphs) < K:
                break
            others = rng.sample([p for p in paragraphs if p != paragraph["context"]], K - 1)
            texts = [paragraph["context"], *others]
            passages = [Passage(str(i), str(i), article["title"], t, rng.random()) for i, t in enumerate(texts)]
            found.append((paragraph["qas"][0]["question"], passages))
    return found


def cpu_ms(fn: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.process_time()
        fn()
        best = min(best, time.process_time() - start)
    return best * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, default=Path("../shared/data/dev"))
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    calibration = use_calibration()
    judge, relevance = calibration.judge, calibration.relevance
    measured = rounds(args.data_dir, args.rounds // 2)

    def per_passage(question: str, passages: list[Passage]) -> object:
        scorer = QueryScorer.of(relevance, question)
        return [scorer.score(p.title, p.text, p.score) for p in passages]

    print(f"{len(measured)} rounds of {K} passages (HotpotQA EN and JSQuAD JA), CPU ms, best of {args.repeat}")
    print("| first stage | per round p50 | per round p95 | per passage (mean) |")
    print("|---|---:|---:|---:|")
    for name, fn in (
        ("fast scorer, each passage alone", per_passage),
        ("round judge", lambda q, ps: judge_round(judge, q, ps)),
    ):
        times = [cpu_ms(lambda q=q, ps=ps, fn=fn: fn(q, ps), args.repeat) for q, ps in measured]
        p95 = statistics.quantiles(times, n=20)[-1]
        print(f"| {name} | {statistics.median(times):.2f} | {p95:.2f} | {statistics.mean(times) / K:.3f} |")
    code = "import time; s = time.perf_counter(); import pipelines.shared.judge; print(time.perf_counter() - s)"
    after_relevance = (
        "import time, pipelines.shared.relevance; s = time.perf_counter(); import pipelines.shared.judge; "
        "print(time.perf_counter() - s)"
    )
    cold = float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    warm = float(
        subprocess.run([sys.executable, "-c", after_relevance], capture_output=True, text=True, check=True).stdout
    )
    parameters = 2 + len(judge.latin_weights) + len(judge.cjk_weights)  # with the two intercepts
    print(
        f"start-up: importing the judge {cold * 1000:.1f} ms alone, {warm * 1000:.1f} ms after the fast scorer "
        f"(the service imports both); its model is {parameters} parameters, in the calibration's artefact, no session"
    )


if __name__ == "__main__":
    main()
