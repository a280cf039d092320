"""Cache-hit latency and throughput over HTTP against a running gateway, next to cache misses.

    python -m tests.benchmarks.cache_latency --url http://127.0.0.1:8000 --concurrency 32 --seconds 20

Seeds a tenant with one document, measures a few misses (each a fresh query, so the local model
runs), then sequential hits (p50/p99) and a closed-loop hit workload at the given concurrency for
the given duration (requests/s, p50/p99). Bounded in count and time; loopback only.
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid

import httpx

from tests.benchmarks.figures import percentile as pct


async def timed_post(client: httpx.AsyncClient, body: dict[str, object]) -> tuple[float, dict[str, object]]:
    started = time.perf_counter()
    response = await client.post("/v1/query", json=body)
    elapsed = (time.perf_counter() - started) * 1000
    response.raise_for_status()
    return elapsed, response.json()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--hits", type=int, default=300, help="sequential hit requests for p50/p99")
    parser.add_argument("--misses", type=int, default=5)
    args = parser.parse_args()
    tenant = f"bench-{uuid.uuid4().hex[:8]}"
    limits = httpx.Limits(max_connections=args.concurrency, max_keepalive_connections=args.concurrency)
    async with httpx.AsyncClient(base_url=args.url, timeout=300, limits=limits) as client:
        doc = {"id": "leave", "title": "Leave policy", "text": "Employees get 25 days of annual leave per year."}
        (await client.post("/v1/documents", json={"tenant": tenant, "documents": [doc]})).raise_for_status()
        misses = []
        for i in range(args.misses):
            ms, body = await timed_post(
                client, {"tenant": tenant, "query": f"How many leave days do employees get? ({i})"}
            )
            assert body["cached"] is False
            misses.append(ms)
        hit_body = {"tenant": tenant, "query": "How many leave days do employees get? (0)"}
        sequential = []
        for _ in range(args.hits):
            ms, body = await timed_post(client, hit_body)
            assert body["cached"] is True
            sequential.append(ms)
        loaded: list[float] = []
        deadline = time.perf_counter() + args.seconds

        async def worker() -> None:
            while time.perf_counter() < deadline:
                ms, _ = await timed_post(client, hit_body)
                loaded.append(ms)

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(args.concurrency)))
        wall = time.perf_counter() - started
    print(f"miss (local model)   n={len(misses):>5}  p50={pct(misses, 50):8.1f} ms  p99={pct(misses, 99):8.1f} ms")
    line = f"n={len(sequential):>5}  p50={pct(sequential, 50):8.2f} ms  p99={pct(sequential, 99):8.2f} ms"
    print(f"hit, sequential      {line}")
    print(
        f"hit, concurrency {args.concurrency:<3} n={len(loaded):>5}  p50={pct(loaded, 50):8.2f} ms  "
        f"p99={pct(loaded, 99):8.2f} ms  {len(loaded) / wall:8.1f} req/s over {wall:.1f} s"
    )


if __name__ == "__main__":
    asyncio.run(main())
