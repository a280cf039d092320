"""Each file type, English and Japanese, from upload to a cited answer on the embedded model.

    python -m tests.benchmarks.file_answers

Starts llama-server with the embedded model and a gateway (open mode on loopback, no answer cache), uploads the
handbook sample of each type (``tests/sample_files.py``: a fact under "chapter › section", beside another chapter)
to a tenant of its own through ``POST /v1/files``, and asks the fact's question on ``single_hop``. Prints per file:
chunks and sections indexed, the section path of the best source, whether the answer holds the fact, and the answer.
Results: ``tests/benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import httpx

from gateway.settings import LOCAL_MODEL
from routes.offline.local_llm.model import DEFAULT_MODEL, default_model_dir, prepare
from routes.offline.local_llm.server import LocalLLMServer, ServerConfig
from tests.benchmarks.miss_cost import ROOT, free_port, gateway
from tests.sample_files import BUILDERS, FACTS, sample

REDIS_URL = "redis://127.0.0.1:6379/14"


def main() -> None:
    env = {
        "GATEWAY_API_KEYS": "[]",  # open mode (loopback): one tenant per file
        "GATEWAY_CACHE_ENABLED": "false",
        "GATEWAY_LOAD_SAMPLE_KB": "false",
        "GATEWAY_LLM_MODEL": LOCAL_MODEL,
        "GATEWAY_BUDGET_MAX_SECONDS": "600",
    }
    config = ServerConfig(prepare(DEFAULT_MODEL, default_model_dir()), port=free_port())
    print("| type | lang | chunks | sections | best source's section | fact in answer | s | answer |")
    print("|---|---|---:|---:|---|---|---:|---|")
    with (
        LocalLLMServer(config),
        tempfile.TemporaryDirectory(prefix="file-answers-") as work,
        gateway(ROOT, config.base_url, REDIS_URL, "unused", Path(work), Path(work) / "gateway.log", env) as (_, base),
        httpx.Client(timeout=900) as client,
    ):
        for kind in BUILDERS:
            for lang, fact in FACTS.items():
                tenant = f"{kind}-{lang}"
                name, data = sample(kind, lang)
                uploaded = client.post(f"{base}/v1/files", params={"tenant": tenant}, files=[("files", (name, data))])
                uploaded.raise_for_status()
                outcome = uploaded.json()["files"][0]
                started = time.monotonic()
                body = {"query": fact.question, "tenant": tenant, "route": "single_hop"}
                answer = client.post(f"{base}/v1/query", json=body)
                answer.raise_for_status()
                result = answer.json()
                seconds = time.monotonic() - started
                section = result["sources"][0]["section"] if result["sources"] else ""
                held = fact.answer in result["answer"] or (lang == "en" and "4" in result["answer"])
                print(
                    f"| {kind} | {lang} | {outcome['chunks']} | {outcome['sections']} | {section or '(none)'} | "
                    f"{'yes' if held else 'no'} | {seconds:.0f} | {result['answer'][:120]!r} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
