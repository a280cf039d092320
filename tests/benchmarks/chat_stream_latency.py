"""Time to first token vs whole answer on the OpenAI-compatible endpoint of a running gateway.

    python -m tests.benchmarks.chat_stream_latency --url http://127.0.0.1:8000 --n 3 [--key KEY]

For each model (route) it sends N distinct questions with ``stream: true`` through the official
``openai`` client (a suffix keeps them out of the cache) and prints p50 of the time to the first
content delta and to the end of the stream, then asks the first question again to time a cached
answer. A figure-printing script, not a test.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid

import openai

QUESTIONS = {
    "gateway-direct": [
        "Write two sentences about the sea.",
        "Explain what a compiler does in two sentences.",
        "Give three tips for writing clear emails.",
    ],
    "gateway-single-hop": [
        "What is the maximum payload of the Kumo Carrier K2?",
        "How many days of paid leave do Kumo Robotics employees get?",
        "What is the battery life of the Kumo Carrier K2?",
    ],
}


def timed_stream(client: openai.OpenAI, model: str, question: str) -> tuple[float, float, int]:
    started = time.perf_counter()
    first = 0.0
    pieces = 0
    stream = client.chat.completions.create(model=model, messages=[{"role": "user", "content": question}], stream=True)
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            pieces += 1
            if not first:
                first = time.perf_counter() - started
    return first, time.perf_counter() - started, pieces


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--n", type=int, default=3)
    parser.add_argument("--key", default="local")
    args = parser.parse_args()
    client = openai.OpenAI(base_url=f"{args.url}/v1", api_key=args.key, max_retries=0, timeout=600)
    run = uuid.uuid4().hex[:6]
    for model, questions in QUESTIONS.items():
        results = [timed_stream(client, model, f"{q} (run {run}-{i})") for i, q in enumerate(questions[: args.n])]
        ttft = statistics.median(r[0] for r in results)
        total = statistics.median(r[1] for r in results)
        chunks = statistics.median(r[2] for r in results)
        print(
            f"{model:20s} n={len(results)}  first token p50 {ttft:6.2f} s  "
            f"whole answer p50 {total:6.2f} s  chunks p50 {chunks:.0f}"
        )
        cached = timed_stream(client, model, f"{questions[0]} (run {run}-0)")
        print(f"{'':20s} cached repeat: first chunk {cached[0] * 1000:7.1f} ms  whole {cached[1] * 1000:7.1f} ms")


if __name__ == "__main__":
    main()
