"""This gateway's cache hits against LiteLLM's, in interleaved rounds (hits at >= 7x its throughput).

    python -m tests.benchmarks.hits_vs_litellm [--rounds 4] [--duration 10] [--models gateway-auto]

:mod:`tests.benchmarks.miss_cost` measures hits a few minutes after ``shared/perf/bench_litellm.sh`` measured
LiteLLM's, and this 2-core machine's speed swings by 2x within minutes: the same commit's ``gateway-auto`` hits
ran at 831 and 451 req/s in two runs three minutes apart. This script keeps LiteLLM with the kit's Redis cache
(``run_litellm.sh start redis``, as ``bench_litellm.sh`` measures its hits) and one gateway up at once, against
one fake upstream and the Redis both cache in, fills both caches with the kit's one prompt, then runs the kit's
``load.py run`` (``--concurrency`` clients for ``--duration`` seconds, the same prompt) on each in turn, rotating
the order every round. It prints every round's req/s and server CPU ms per request, and the median ratio.

Needs the kit's tools venv and its LiteLLM venv (``shared/perf/setup.sh``). Run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from tests.benchmarks.miss_cost import open_kit, run_args
from tests.benchmarks.miss_vs_litellm import (
    LITELLM,
    LITELLM_KEY,
    LITELLM_MODEL,
    add_one_gateway_arguments,
    print_rounds,
    run_rounds,
    side_by_side,
)

WARM_S = 2.0  # one short run per side first: opens the connections and stores the answer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_one_gateway_arguments(parser, rounds=4)
    parser.set_defaults(models=["gateway-auto"])
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per side and round")
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "hits_vs_litellm")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    kit = open_kit(args)
    with side_by_side(args, kit, "redis") as up:

        def load(side: str, seconds: float) -> list[str]:
            if side == LITELLM:
                return run_args(up.litellm[1], LITELLM_KEY, LITELLM_MODEL, args.concurrency, seconds, unique=False)
            return run_args(up.gateway[1], up.key, side, args.concurrency, seconds, unique=False)

        for side in [LITELLM, *args.models]:
            kit.load([*load(side, WARM_S), "--label", f"warm {side}"], args.out / "warm.jsonl")
        rows = run_rounds(kit, up, args, lambda side: load(side, args.duration), ("rps", "server_cpu_ms_per_req"))
    print_rounds(rows, args.models, ("hits req/s", "CPU ms per hit"))


if __name__ == "__main__":
    main()
