"""End-to-end latency per route against a running gateway (default: the one `make run` starts).

    python -m tests.benchmarks.route_latency --url http://127.0.0.1:8000 --n 10

Sends N queries per route (forced with "route", on the sample knowledge base in tenant "default"),
one at a time, and prints p50/p95 of the HTTP round trip and of the gateway's own latency_ms,
plus LLM calls and tokens per query. A figure-printing script, not a test.
"""

from __future__ import annotations

import argparse
import statistics
import time

import httpx

from tests.benchmarks.figures import percentile

QUERIES: dict[str, list[str]] = {
    "direct": [
        "Hello! How are you today?",
        "What is 17 times 23?",
        "Translate 'thank you very much' into Japanese.",
        "What does HTTP stand for?",
        "Who are you and what can you do?",
        "おはようございます！",
        "Convert 5 kilometres to miles.",
        "Rewrite more politely: send me the report now.",
        "What is the capital of France?",
        "ありがとう、助かりました。",
    ],
    "single_hop": [
        "What is the maximum payload of the Kumo Carrier K2?",
        "When was the VPN policy last updated?",
        "What is the on-call escalation phone number?",
        "How long does the K2 battery last on a full charge?",
        "Who founded Kumo Robotics?",
        "What is the hotel limit per night in Berlin?",
        "大阪オフィスの社員数は何人ですか",
        "How many days per week may employees work remotely?",
        "What is the first-day onboarding task for new employees?",
        "住宅手当はいくらですか",
    ],
    "multi_hop": [
        "Who leads the office that opened first?",
        "What is the hotel limit in the city where Kumo opened its first office outside Japan?",
        "Which opened earlier, the Tokyo office or the Berlin office?",
        "Do employees of the office opened in 2022 get the housing allowance?",
        "What share of the total headcount works in the Osaka office?",
        "Which product replaced the K1, and how much more payload does it carry?",
        "Who founded the company that makes the Kumo Carrier K2?",
        "How many years after the company was founded did the Berlin office open?",
        "最初に開設されたオフィスの責任者は誰ですか",
        "What is the VPN policy version and when did the Tokyo office open?",
    ],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--n", type=int, default=10)
    parser.add_argument("--tenant", default="default")
    args = parser.parse_args()
    with httpx.Client(base_url=args.url, timeout=300) as client:
        header = ("route", "n", "http p50", "http p95", "gw p50", "llm calls", "in tok", "out tok", "abstained")
        print(" ".join(f"{h:>10}" for h in header))
        for route, queries in QUERIES.items():
            http_ms: list[float] = []
            gateway_ms: list[float] = []
            calls: list[int] = []
            tokens_in: list[int] = []
            tokens_out: list[int] = []
            abstained = 0
            for query in (queries * ((args.n // len(queries)) + 1))[: args.n]:
                started = time.perf_counter()
                response = client.post("/v1/query", json={"query": query, "route": route, "tenant": args.tenant})
                http_ms.append((time.perf_counter() - started) * 1000)
                response.raise_for_status()
                body = response.json()
                gateway_ms.append(body["latency_ms"])
                calls.append(body["usage"]["llm_calls"])
                tokens_in.append(body["usage"]["input_tokens"])
                tokens_out.append(body["usage"]["output_tokens"])
                abstained += bool(body.get("abstained"))
            print(
                f"{route:>10} {len(http_ms):>10} {percentile(http_ms, 50):>8.0f}ms {percentile(http_ms, 95):>8.0f}ms "
                f"{percentile(gateway_ms, 50):>8.0f}ms {statistics.mean(calls):>10.2f} "
                f"{statistics.mean(tokens_in):>10.0f} {statistics.mean(tokens_out):>10.0f} {abstained:>10}"
            )


if __name__ == "__main__":
    main()
