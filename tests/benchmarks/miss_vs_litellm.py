"""This gateway's sequential miss against LiteLLM's proxy, in interleaved rounds (ratios).

    python -m tests.benchmarks.miss_vs_litellm [--rounds 6] [--seq-n 300] [--gateway-env NAME=VALUE ...]

The targets are ratios to LiteLLM measured in one sitting. Run one after the other
(``shared/perf/bench_litellm.sh``, then :mod:`tests.benchmarks.miss_cost`), the two sides see different
minutes of this shared 2-core machine, whose speed swings by up to 2x within minutes: the same gateway
commit measured 2.7 and 6.0 ms of CPU per ``direct`` miss a few minutes apart (``miss_ab``), LiteLLM
13.3-17.7 ms over four sittings. This script keeps LiteLLM (the kit's ``run_litellm.sh start plain``, no
cache, as for its misses) and one gateway up at once against one fake upstream, and runs the kit's
``load.py overhead --unique`` on each in turn, rotating the order every round, so each round's ratio
compares minutes alike. It prints every round (CPU ms per miss and added p50 for LiteLLM and each gateway
model, and the ratios) and the median of each ratio over the rounds.

``--gateway-env`` sets the gateway's settings; ``{upstream}`` in a value is the fake upstream's base URL (its
port is chosen at start), so a remote embedder can be the fake's ``/v1/embeddings``::

    --gateway-env GATEWAY_EMBEDDING_PROVIDER=openai GATEWAY_EMBEDDING_BASE_URL={upstream} \
        GATEWAY_EMBEDDING_MODEL=fake-embed GATEWAY_ROUTER_CACHE_DIR=/tmp/fake-embed-router

The fake answers one constant vector for every text: such a run measures CPU per miss, never routing quality, and
``gateway-auto``'s route then turns on the rest of each prompt (some unique prompts go ``multi_hop``). The script
prints the route one unique prompt takes under each model and the load averages at its start and end.

Needs the kit's tools venv and its LiteLLM venv (``shared/perf/setup.sh tools``, ``run_litellm.sh install``).
Run it on a quiet machine, nothing else running.
"""

from __future__ import annotations

import argparse
import os
import secrets
import statistics
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.benchmarks.miss_ab import settings_pairs
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

LITELLM_KEY = "sk-perfkit-local-bench-7f3a9c"  # run_litellm.sh's master key for the plain config
LITELLM_MODEL = "fake-gpt"
LITELLM = "litellm"  # LiteLLM's side in the rounds


@contextmanager
def litellm(kit: Kit, upstream_port: int, variant: str = "plain") -> Iterator[tuple[int, str]]:
    """LiteLLM's proxy on a free port, without a cache (``plain``) or with the kit's Redis one (``redis``); yields
    (pid, base URL)."""
    port = free_port()
    env = {**kit.env(upstream_port), "LITELLM_PORT": str(port)}
    script = str(kit.directory / "run_litellm.sh")
    subprocess.run([script, "start", variant], check=True, env=env, stdout=subprocess.DEVNULL)  # waits until ready
    try:
        yield int((kit.perfkit / "litellm.pid").read_text().strip()), f"http://127.0.0.1:{port}"
    finally:
        subprocess.run([script, "stop"], check=False, env=env, stdout=subprocess.DEVNULL)


def ratio_line(name: str, values: list[float]) -> str:
    return f"{name}: median {statistics.median(values):.2f}× (rounds {min(values):.2f}-{max(values):.2f}×)"


def add_one_gateway_arguments(parser: argparse.ArgumentParser, rounds: int) -> None:
    """The kit's arguments plus one gateway's: its checkout, its settings and how many rounds to measure."""
    add_kit_arguments(parser)
    parser.add_argument("--root", type=Path, default=ROOT, help="the gateway checkout to run (default: this one)")
    parser.add_argument("--rounds", type=int, default=rounds)
    parser.add_argument(
        "--gateway-env",
        nargs="*",
        default=[],
        metavar="NAME=VALUE",
        help="gateway settings; {upstream} in a value is the fake upstream's base URL",
    )


def one_gateway(
    args: argparse.Namespace, upstream: str, key: str, work: Path, log: Path
) -> AbstractContextManager[tuple[int, str]]:
    """The gateway :func:`add_one_gateway_arguments` named, against ``upstream``; yields (pid, base URL)."""
    return gateway(args.root.resolve(), upstream, args.redis_url, key, work, log, gateway_settings(args, upstream))


def gateway_settings(args: argparse.Namespace, upstream: str) -> dict[str, str]:
    """``--gateway-env``'s settings with ``{upstream}`` replaced by the fake upstream's base URL: the upstream's port
    is only known once it is up, and a setting such as the embeddings endpoint must point at it."""
    return {name: value.replace("{upstream}", upstream) for name, value in settings_pairs(args.gateway_env).items()}


@dataclass(frozen=True, slots=True)
class SideBySide:
    """LiteLLM and one gateway up at once against one fake upstream: each one's (pid, base URL), and the gateway's
    key."""

    upstream: str
    litellm: tuple[int, str]
    gateway: tuple[int, str]
    key: str


@contextmanager
def side_by_side(args: argparse.Namespace, kit: Kit, variant: str) -> Iterator[SideBySide]:
    """LiteLLM (``variant``: ``plain`` or ``redis``) and the gateway :func:`add_one_gateway_arguments` named."""
    key = "bench-" + secrets.token_urlsafe(24)
    upstream_port = free_port()
    with (
        tempfile.TemporaryDirectory(prefix="vs-litellm-") as work,
        kit.upstream(upstream_port) as upstream,
        litellm(kit, upstream_port, variant) as lite,
        one_gateway(args, upstream, key, Path(work), args.out / "gateway.log") as served,
    ):
        yield SideBySide(upstream, lite, served, key)


def rotated(sides: list[str], round_no: int) -> list[str]:
    """The sides in round ``round_no``'s order: each round starts one further on, so drift hits every side alike."""
    shift = round_no % len(sides)
    return sides[shift:] + sides[:shift]


# A round's figures: per side, the two measures taken from its load.py result.
Round = dict[str, tuple[float, float]]


def run_rounds(
    kit: Kit,
    up: SideBySide,
    args: argparse.Namespace,
    load: Callable[[str], list[str]],
    measures: tuple[str, str],
) -> list[Round]:
    """``args.rounds`` rounds of ``load(side)`` (load.py's arguments) on LiteLLM and each of ``args.models``, in rotated
    order, keeping the two ``measures`` (fields of load.py's result) of each. A side with errors stops the run: its
    figures would not be a measure of the same work."""
    sides = [LITELLM, *args.models]
    rows: list[Round] = []
    for round_no in range(args.rounds):
        row: Round = {}
        for side in rotated(sides, round_no):
            pid = up.litellm[0] if side == LITELLM else up.gateway[0]
            label = f"round {round_no + 1} {side}"
            result = kit.load([*load(side), "--pid", str(pid), "--label", label], args.out / "rounds.jsonl")
            if result.get("errors"):
                raise SystemExit(f"{label}: {result['errors']} errors ({result.get('status')})")
            row[side] = (float(result[measures[0]]), float(result[measures[1]]))
        rows.append(row)
    return rows


def print_rounds(rows: list[Round], models: list[str], names: tuple[str, str]) -> None:
    """Every round's two measures per side and each model's ratios to LiteLLM's, then the ratios' medians."""
    sides = [LITELLM, *models]
    first, second = names
    header = " | ".join(f"{side} {first} / {second}" for side in sides)
    print(f"| round | {header} | " + " | ".join(f"{m} ratios" for m in models) + " |")
    print("|---" * (1 + len(sides) + len(models)) + "|")
    for number, row in enumerate(rows, 1):
        cells = [f"{row[side][0]:.2f} / {row[side][1]:.2f}" for side in sides]
        lite_first, lite_second = row[LITELLM]
        ratios = [f"{row[m][0] / lite_first:.2f}× / {row[m][1] / lite_second:.2f}×" for m in models]
        print(f"| {number} | " + " | ".join(cells + ratios) + " |")
    print()
    for model in models:
        print(ratio_line(f"{model} {first} / LiteLLM's", [r[model][0] / r[LITELLM][0] for r in rows]))
        print(ratio_line(f"{model} {second} / LiteLLM's", [r[model][1] / r[LITELLM][1] for r in rows]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_one_gateway_arguments(parser, rounds=6)
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "miss_vs_litellm")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    kit = open_kit(args)
    started = load_average()
    with side_by_side(args, kit, "plain") as up:
        # What a model's miss costs depends on the route it takes (a settings change can move it): say which.
        routes = {model: probe_route(up.gateway[1], up.key, model) for model in args.models}

        def load(side: str) -> list[str]:
            if side == LITELLM:
                return overhead_args(up.litellm[1], up.upstream, LITELLM_KEY, LITELLM_MODEL, args.seq_n)
            return overhead_args(up.gateway[1], up.upstream, up.key, side, args.seq_n)

        rows = run_rounds(kit, up, args, load, ("server_cpu_ms_per_req", "added_p50_ms"))
    print_rounds(rows, args.models, ("CPU per miss", "added p50"))
    print("routes taken by a unique prompt: " + ", ".join(f"{m} → {r}" for m, r in routes.items()))
    print(f"load average (1, 5, 15 min): {started} at the start, {load_average()} at the end")


def load_average() -> str:
    """The machine's load averages: figures taken beside other jobs are inflated, and the report should say by how
    much company they were taken in."""
    return ", ".join(f"{value:.2f}" for value in os.getloadavg())


if __name__ == "__main__":
    main()
