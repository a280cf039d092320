"""Two gateway variants' CPU per sequential miss, measured in alternating rounds.

    python -m tests.benchmarks.miss_ab --b-env GATEWAY_EMBEDDING_PIECE_ROWS=0 [--a-root DIR] [--b-root DIR]
                                       [--models gateway-direct gateway-auto] [--blocks 2] [--rounds 4]

:mod:`tests.benchmarks.miss_cost` prints the issue's table for one gateway, but its sequential CPU figure
moves by ±30 % between runs of the same code on this 2-core machine (4.1-8.7 ms per ``direct`` miss over
six runs), more than most single changes save. This script keeps both variants up at once, against
one fake upstream and one Redis, and runs the kit's ``load.py overhead --unique`` on each in turn,
alternating which goes first, so drift hits both alike. Which of two identical gateways was started
second also matters (an A/A run: 12 % less CPU for the second, in 5 of 6 rounds), so the rounds come
in blocks, and each block restarts both in the other order. A variant is a checkout (``--a-root``/``--b-root``,
e.g. a ``git worktree`` of the commit before a change; default this one) plus settings
(``--a-env``/``--b-env`` NAME=VALUE). It prints, per model, each round's CPU ms per miss and added p50
latency for A and B, their medians, and in how many rounds B cost less CPU than A.

Run it on a quiet machine, nothing else running; compare the two columns, not absolute figures.
"""

from __future__ import annotations

import argparse
import secrets
import statistics
import tempfile
from contextlib import ExitStack
from pathlib import Path

from tests.benchmarks.miss_cost import (
    ROOT,
    Kit,
    add_kit_arguments,
    free_port,
    gateway,
    open_kit,
    overhead_args,
    probe_route,
)


def settings_pairs(pairs: list[str]) -> dict[str, str]:
    env: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise SystemExit(f"settings are NAME=VALUE, got {pair!r}")
        env[name] = value
    return env


def overhead(
    kit: Kit, base: str, upstream: str, key: str, model: str, pid: int, n: int, out: Path
) -> tuple[float, float]:
    """One ``load.py overhead --unique`` run: (server CPU ms per miss, added p50 ms)."""
    row = kit.load([*overhead_args(base, upstream, key, model, n), "--pid", str(pid)], out)
    return float(row["server_cpu_ms_per_req"]), float(row["added_p50_ms"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_kit_arguments(parser)
    parser.add_argument("--a-root", type=Path, default=ROOT)
    parser.add_argument("--b-root", type=Path, default=ROOT)
    parser.add_argument("--a-env", nargs="*", default=[], metavar="NAME=VALUE")
    parser.add_argument("--b-env", nargs="*", default=[], metavar="NAME=VALUE")
    parser.add_argument("--rounds", type=int, default=4, help="rounds per block")
    parser.add_argument("--blocks", type=int, default=2, help="restarts of both gateways, in alternating order")
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "miss_ab")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    kit = open_kit(args)
    key = "bench-" + secrets.token_urlsafe(24)
    variants = {"A": (args.a_root, settings_pairs(args.a_env)), "B": (args.b_root, settings_pairs(args.b_env))}
    figures: dict[str, dict[str, list[tuple[float, float]]]] = {m: {"A": [], "B": []} for m in args.models}
    routes: dict[str, dict[str, str]] = {}
    with kit.upstream(free_port()) as upstream:
        for block in range(args.blocks):
            # Which process starts second matters by itself (an A/A run gave the second one 12 % less CPU in 5 of
            # 6 rounds), so each block starts both anew, in the other order from the block before.
            order = ["A", "B"] if block % 2 == 0 else ["B", "A"]
            with ExitStack() as stack:
                served: dict[str, tuple[int, str]] = {}
                for name in order:
                    root, env = variants[name]
                    work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=f"miss-ab-{name}-")))
                    log = args.out / f"gateway-{name}-{block}.log"
                    served[name] = stack.enter_context(
                        gateway(root.resolve(), upstream, args.redis_url, key, work, log, extra_env=env)
                    )
                for model in args.models:
                    routes[model] = {name: probe_route(base, key, model) for name, (_pid, base) in served.items()}
                    for round_ in range(args.rounds):
                        for name in order if round_ % 2 == 0 else order[::-1]:
                            pid, base = served[name]
                            figures[model][name].append(
                                overhead(kit, base, upstream, key, model, pid, args.seq_n, args.out / "load.jsonl")
                            )
    for model in args.models:
        report(model, routes[model], variants, figures[model], args.rounds)


def report(
    model: str,
    routes: dict[str, str],
    variants: dict[str, tuple[Path, dict[str, str]]],
    figures: dict[str, list[tuple[float, float]]],
    rounds: int,
) -> None:
    print(f"\n{model} (routes: A {routes['A']}, B {routes['B']}); A: {variants['A']}, B: {variants['B']}")
    print("| block.round | A CPU ms/miss | B CPU ms/miss | A added p50 ms | B added p50 ms |")
    print("|---|---:|---:|---:|---:|")
    pairs = list(zip(figures["A"], figures["B"], strict=True))
    for i, ((a_cpu, a_lat), (b_cpu, b_lat)) in enumerate(pairs):
        print(f"| {i // rounds + 1}.{i % rounds + 1} | {a_cpu:.2f} | {b_cpu:.2f} | {a_lat:.2f} | {b_lat:.2f} |")
    med = {n: (statistics.median(c for c, _ in f), statistics.median(lat for _, lat in f)) for n, f in figures.items()}
    lower = sum(b[0] < a[0] for a, b in pairs)
    print(
        f"| median | {med['A'][0]:.2f} | {med['B'][0]:.2f} | {med['A'][1]:.2f} | {med['B'][1]:.2f} |\n"
        f"B cost less CPU than A in {lower} of {len(pairs)} rounds"
    )


if __name__ == "__main__":
    main()
