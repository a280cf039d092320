"""A short, mixed load on a running gateway: fresh questions on every route, then repeats (cache hits).

    python deploy/local/traffic.py --url http://127.0.0.1:8000 --seconds 180

Every question is asked once with its route forced (``direct``, ``single_hop``, ``multi_hop``) and
once more through the router (``auto``), which runs the local model; then the same questions are
repeated at ``--rps`` for ``--seconds`` (exact-cache hits), plus a few bad requests (400s), so every
dashboard panel has data. Prints the ``trace_id`` of each fresh answer.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import time

import httpx

# Questions on the sample knowledge base (GATEWAY_LOAD_SAMPLE_KB=true, tenant "default").
QUESTIONS = [
    ("direct", "Hi! What can you help me with?"),
    ("single_hop", "When was the VPN policy last updated?"),
    ("multi_hop", "Who founded the company that makes the Kumo Carrier K2, and in which city?"),
    ("auto", "Thanks, that is all."),
    ("auto", "What is the maximum payload of the Kumo Carrier K2?"),
    ("single_hop", "Who painted the ceiling of the Sistine Chapel?"),  # nothing relevant: escalates to multi_hop
]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--seconds", type=float, default=180.0)
    parser.add_argument("--rps", type=float, default=5.0)
    args = parser.parse_args()
    async with httpx.AsyncClient(base_url=args.url, timeout=600) as client:
        for route, query in QUESTIONS:
            started = time.perf_counter()
            response = await client.post("/v1/query", json={"query": query, "route": route})
            body = response.json()
            print(
                f"{response.status_code} {route:<10} -> {body.get('route')!s:<10} cached={body.get('cached')!s:<5} "
                f"{time.perf_counter() - started:6.1f}s trace_id={response.headers.get('x-trace-id')}"
            )
        deadline = time.monotonic() + args.seconds
        sent = 0
        for route, query in itertools.cycle(QUESTIONS):
            if time.monotonic() >= deadline:
                break
            response = await client.post("/v1/query", json={"query": query, "route": route})
            sent += 1
            if sent % 50 == 0:
                await client.post("/v1/query", json={"query": "  "})  # a 400: the error panels have data
                await client.get("/readyz")
            assert response.status_code == 200, response.text
            await asyncio.sleep(1 / args.rps)
    print(f"{sent} repeat requests sent")


if __name__ == "__main__":
    asyncio.run(main())
