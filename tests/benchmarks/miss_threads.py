"""Where a sequential miss's CPU goes, thread by thread: the event loop against the query embedding's thread.

    python -m tests.benchmarks.miss_threads [--seq-n 500] [--rounds 2] [--gateway-env NAME=VALUE ...]

A process's CPU per request (``load.py --pid``) does not say which thread spent it. An ``auto`` miss embeds its
query on the model's own worker thread (``USEEmbeddings.aembed_query``) while everything else runs on the event
loop, and the two are cut by different changes: the embedding by the model and its tokenizer, the loop by the
router, the caches and the model call. This starts one gateway against the kit's fake upstream (as
:mod:`tests.benchmarks.miss_cost` does), runs ``load.py overhead --unique`` for each model and reads every
thread's user + system time from ``/proc/<pid>/task`` before and after, printing each thread's share of the
process's CPU per miss, in ms (threads under 0.01 ms left out), beside the process's figure and the added p50
latency. Linux only.
"""

from __future__ import annotations

import argparse
import os
import secrets
import tempfile
from pathlib import Path

from tests.benchmarks.miss_cost import free_port, open_kit, overhead_args
from tests.benchmarks.miss_vs_litellm import add_one_gateway_arguments, one_gateway


def thread_seconds(pid: int) -> dict[str, float]:
    """``name:tid`` -> CPU seconds (user + system) of every thread of ``pid`` now."""
    ticks = os.sysconf("SC_CLK_TCK")
    found: dict[str, float] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
            name = Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
        except OSError:  # the thread ended meanwhile
            continue
        fields = stat.rpartition(")")[2].split()  # after the name, which may hold spaces
        found[f"{name}:{tid}"] = (int(fields[11]) + int(fields[12])) / ticks
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_one_gateway_arguments(parser, rounds=2)
    args = parser.parse_args()
    kit = open_kit(args)
    key = "bench-" + secrets.token_urlsafe(24)
    print("| round | model | process CPU ms/miss | added p50 ms | CPU ms/miss by thread |")
    print("|---|---|---:|---:|---|")
    with (
        tempfile.TemporaryDirectory(prefix="miss-threads-") as work,
        kit.upstream(free_port()) as upstream,
        one_gateway(args, upstream, key, Path(work), Path(work) / "gateway.log") as (pid, base),
    ):
        for round_ in range(1, args.rounds + 1):
            for model in args.models:
                before = thread_seconds(pid)
                result = kit.load(
                    [*overhead_args(base, upstream, key, model, args.seq_n), "--pid", str(pid)], Path(work) / "o.jsonl"
                )
                after = thread_seconds(pid)
                spent = {name: seconds - before.get(name, 0.0) for name, seconds in after.items()}
                # The window read here also holds load.py's warm-up requests: each thread's share of it,
                # applied to the process's CPU per miss over the measured requests.
                total = sum(spent.values()) or 1.0
                cpu = float(result["server_cpu_ms_per_req"])
                per = {name: cpu * seconds / total for name, seconds in spent.items()}
                threads = ", ".join(f"{name} {ms:.2f}" for name, ms in sorted(per.items()) if ms >= 0.01)
                print(
                    f"| {round_} | {model} | {result['server_cpu_ms_per_req']:.2f} | {result['added_p50_ms']:.2f} "
                    f"| {threads} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
