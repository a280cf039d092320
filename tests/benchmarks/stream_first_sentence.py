"""When a streamed answer's first words reach the client, against when the upstream wrote them.

    python -m tests.benchmarks.stream_first_sentence [--runs 3] [--root DIR] [--token-ms 50]

A gateway process (``--root``: the checkout to run, so an older commit can be measured the same way) answers
``stream: true`` chat requests over a tenant holding one six-sentence document. Its upstream is the tests' fake
OpenAI server, streaming an answer made of those six sentences, cited, at ``--token-ms`` per word-sized token; the
hop planner and critics are answered at once (their calls are not what is measured). For each of
``gateway-single-hop``, ``gateway-multi-hop`` and ``gateway-direct`` it prints, in ms from the request: the
upstream's end of its first sentence (the time it wrote the token ending it; a request that does not stream is
generated at the same pace and sent whole at the end), the client's first content chunk,
the upstream's last token and the client's last content chunk. The target: a first chunk no later than the
upstream's first sentence end + 150 ms. Results: ``tests/benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from tests.benchmarks.miss_cost import ROOT, gateway
from tests.fakes.openai_server import Answer, FakeOpenAI

KEY = "bench-stream-key"
TENANT = "stream-bench"
SENTENCES = [
    "The Kumo Carrier K9 is a delivery robot built by Kumo Robotics in Osaka.",
    "It carries loads of up to 40 kg on its flat cargo deck.",
    "Its battery lasts eight hours and recharges in ninety minutes.",
    "The K9 climbs kerbs and ramps with six rubber wheels.",
    "Fleet operators track every K9 through the Kumo Control web console.",
    "The robot stops on its own when a person steps into its path.",
]
DOCUMENT = " ".join(SENTENCES)
ANSWER = " ".join(f"{s[:-1]} [1]." for s in SENTENCES)
QUESTION = "What is the Kumo Carrier K9 delivery robot and what can it carry and do?"
MODELS = ("gateway-single-hop", "gateway-multi-hop", "gateway-direct")
AGREEABLE = {
    "Grade": {"fact": "The Kumo Carrier K9 is a delivery robot", "relevant": True},
    "GroundednessCheck": {"unsupported_claims": []},
    "UsefulnessCheck": {"useful": True, "missing": ""},
    "NextHop": {"found": "The Kumo Carrier K9 is a delivery robot", "next_query": ""},
    "RouteChoice": {"route": "single_hop", "confidence": 0.9, "reason": "bench"},
}


def first_sentence_end(written: list[tuple[float, str]]) -> float:
    """When the upstream wrote the token that ends the answer's first sentence."""
    text = ""
    for at, token in written:
        text += token
        if text.rstrip().endswith((".", "]")) and SENTENCES[0][:-1] in text:
            return at
    return written[-1][0]


def ask(client: httpx.Client, base: str, model: str, question: str) -> tuple[float, float, str]:
    """One streamed answer: (first content chunk, last content chunk) as time.monotonic(), and the text."""
    body = {"model": model, "stream": True, "messages": [{"role": "user", "content": question}]}
    first = last = 0.0
    text = ""
    with client.stream("POST", f"{base}/v1/chat/completions", json=body) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if not line.startswith("data: {"):
                continue
            payload = json.loads(line[6:])
            content = (payload.get("choices") or [{}])[0].get("delta", {}).get("content")
            if content:
                last = time.monotonic()
                first = first or last
                text += content
    return first, last, text


def measure(root: Path, runs: int, token_s: float) -> dict[str, list[dict[str, float]]]:
    figures: dict[str, list[dict[str, float]]] = {model: [] for model in MODELS}
    entry = {"name": "bench", "key_sha256": hashlib.sha256(KEY.encode()).hexdigest(), "tenant": TENANT}
    entry["scopes"] = ["query", "admin"]  # type: ignore[assignment]
    env = {"GATEWAY_API_KEYS": json.dumps([entry]), "GATEWAY_CACHE_ENABLED": "false", "GATEWAY_LOAD_SAMPLE_KB": "false"}
    with (
        FakeOpenAI(Answer(ANSWER, token_delay_s=token_s), structured=AGREEABLE) as upstream,
        tempfile.TemporaryDirectory(prefix="stream-bench-") as work,
        gateway(
            root, upstream.base_url, "redis://127.0.0.1:6379/14", KEY, Path(work), Path(work) / "gateway.log", env
        ) as (_, base),
        httpx.Client(headers={"Authorization": f"Bearer {KEY}"}, timeout=120) as client,
    ):
        documents = {"documents": [{"id": "k9", "title": "Kumo Carrier K9", "text": DOCUMENT}]}
        client.post(f"{base}/v1/documents", json=documents).raise_for_status()
        for run in range(runs):
            for model in MODELS:
                upstream.written.clear()
                asked = time.monotonic()
                first, last, _ = ask(client, base, model, f"{QUESTION} ({run})")
                written = [w for w in upstream.written if w[0] >= asked]
                figures[model].append(
                    {
                        "upstream_first_sentence": 1000 * (first_sentence_end(written) - asked) if written else 0.0,
                        "first_chunk": 1000 * (first - asked),
                        "upstream_last_token": 1000 * (written[-1][0] - asked) if written else 0.0,
                        "last_chunk": 1000 * (last - asked),
                    }
                )
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.benchmarks.stream_first_sentence")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--root", type=Path, default=ROOT, help="the gateway checkout to run (default: this one)")
    parser.add_argument("--token-ms", type=float, default=50.0)
    args = parser.parse_args()
    figures = measure(args.root, args.runs, args.token_ms / 1000)
    print(f"median of {args.runs} runs, ms from the request; {args.token_ms:.0f} ms per upstream token")
    columns = ["upstream first sentence end", "first content chunk", "minus sentence end", "upstream last token"]
    print("| model | " + " | ".join(columns) + " | last content chunk |")
    print("|---|---:|---:|---:|---:|---:|")
    for model, rows in figures.items():
        med = {key: statistics.median(row[key] for row in rows) for key in rows[0]}
        lag = med["first_chunk"] - med["upstream_first_sentence"]
        print(
            f"| {model} | {med['upstream_first_sentence']:.0f} | {med['first_chunk']:.0f} | {lag:+.0f} | "
            f"{med['upstream_last_token']:.0f} | {med['last_chunk']:.0f} |"
        )


if __name__ == "__main__":
    main()
