"""A streamed ``single_hop`` answer on the embedded model: first content chunk against the whole answer.

    python -m tests.benchmarks.stream_local_model [--root DIR] [--runs 1]

Starts llama-server with the embedded model and a gateway process (``--root``: the checkout to run, so an older
commit is measured the same way) with no response cache, ingests a SQuAD paragraph and a JSQuAD one as two tenants
and asks each two questions with ``stream: true`` on ``gateway-single-hop``: the set's own, whose answer is often
one sentence, and an open one over the same paragraph, whose answer runs to several. Prints, in seconds from the
request, the first content chunk and the last, and the answer. The model's speed on a shared 2-core machine swings
by tens of percent: compare the first chunk's share of the total, not absolute seconds between sittings. Results:
``tests/benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import tempfile
import time
from pathlib import Path

import httpx

from gateway.settings import LOCAL_MODEL
from routes.offline.eval.datasets import load
from routes.offline.eval.sentence_answers import DATA
from routes.offline.local_llm.model import DEFAULT_MODEL, default_model_dir, prepare
from routes.offline.local_llm.server import LocalLLMServer, ServerConfig
from tests.benchmarks.miss_cost import ROOT, free_port, gateway

KEY = "bench-local-stream-key"
TENANT = "bench"
REDIS_URL = "redis://127.0.0.1:6379/14"  # the rate limiter's; no answer is cached
CASES = {
    "en": ("squad_v2_dev_normans.json", "56ddde6b9a695914005b9629"),
    "ja": ("jsquad_valid_sample.json", "a10336p0q1"),
}
# Over the same paragraphs, questions whose answers run to several sentences: where streaming shows.
OPEN = {
    "en": "Who were the Normans, where did their name come from, and what happened to their culture?",
    "ja": "梅雨とはどのような現象で、いつ頃、どの地域で見られますか。詳しく説明してください。",
}


def ask(client: httpx.Client, base: str, tenant: str, question: str) -> tuple[float, float, str]:
    body = {
        "model": "gateway-single-hop",
        "tenant": tenant,
        "stream": True,
        "messages": [{"role": "user", "content": question}],
    }
    started = time.monotonic()
    first = last = 0.0
    text = ""
    with client.stream("POST", f"{base}/v1/chat/completions", json=body) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if line.startswith("data: {"):
                choices = json.loads(line[6:]).get("choices") or [{}]
                content = choices[0].get("delta", {}).get("content")
                if content:
                    last = time.monotonic() - started
                    first = first or last
                    text += content
    return first, last, text


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.benchmarks.stream_local_model")
    parser.add_argument("--root", type=Path, default=ROOT, help="the gateway checkout to run (default: this one)")
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args()
    key = {"name": "bench", "key_sha256": hashlib.sha256(KEY.encode()).hexdigest(), "tenant": TENANT}
    env = {
        "GATEWAY_API_KEYS": json.dumps([{**key, "scopes": ["query", "admin"]}]),
        "GATEWAY_CACHE_ENABLED": "false",
        "GATEWAY_LOAD_SAMPLE_KB": "false",
        "GATEWAY_LLM_MODEL": LOCAL_MODEL,
        "GATEWAY_BUDGET_MAX_SECONDS": "600",
    }
    config = ServerConfig(prepare(DEFAULT_MODEL, default_model_dir()), port=free_port())
    print("| lang | first content chunk s | last content chunk s | answer |")
    print("|---|---:|---:|---|")
    with (
        LocalLLMServer(config),
        tempfile.TemporaryDirectory(prefix="stream-local-") as work,
        gateway(args.root, config.base_url, REDIS_URL, KEY, Path(work), Path(work) / "gateway.log", env) as (_, base),
        httpx.Client(headers={"Authorization": f"Bearer {KEY}"}, timeout=900) as client,
    ):
        for lang, (file, question_id) in CASES.items():
            dataset = load(DATA / file)
            question = next(q for q in dataset.questions if q.id == question_id)
            documents = [d for d in dataset.documents if d["id"] in question.gold_doc_ids]
            body = {"tenant": TENANT, "documents": [{**d, "id": f"{lang}-{d['id']}"} for d in documents]}
            client.post(f"{base}/v1/documents", json=body).raise_for_status()
            for run in range(args.runs):
                for asked in (question.text, OPEN[lang]):
                    first, last, text = ask(client, base, TENANT, asked + (" " * run))
                    print(f"| {lang} | {first:.1f} | {last:.1f} | {text[:160]!r} |", flush=True)


if __name__ == "__main__":
    main()
