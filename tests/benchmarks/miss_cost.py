"""What a request costs this gateway itself, measured the way LiteLLM's proxy is measured.

    python -m tests.benchmarks.miss_cost [--repeat 3] [--litellm results-litellm-….jsonl] [--out DIR]

Starts the shared benchmark kit's zero-latency fake upstream (``shared/perf/run_fake.sh``, model
``fake-gpt``) and one gateway process (``python -m gateway``) against it, with its Redis cache on (the
test Redis, a fresh key prefix per run, so nothing is served from an earlier run) and the sample
knowledge base in the key's tenant, then runs the kit's load generator (``shared/perf/load.py``, with
``--pid`` for the server's CPU) for each model:

- ``overhead --unique``: sequential pairs, gateway then upstream directly: added latency p50/p99 of a
  cache miss, and server CPU per request;
- ``run --unique -c 32 -d 20``: throughput of unique prompts (every request a miss, stored on the way
  out), server CPU per request;
- ``run -c 32 -d 20`` with one prompt: cache hits.

It prints the issue's table for this gateway; with ``--litellm`` (the JSON lines
``shared/perf/bench_litellm.sh`` wrote in the same sitting) LiteLLM's column and the ratios too. Run the
two one after the other, never together, on a quiet machine. ``--profile S`` instead samples the
gateway with py-spy for S seconds per model under unique prompts (concurrency 8, or
``--profile-concurrency``) and prints where the samples go by package (:mod:`tests.benchmarks.profile_summary`).

``--warm-pairs N`` first sends each model N unique sequential pairs that are not counted. By default the figures
are a fresh process's first requests, as the kit measures LiteLLM (its load generator warms up with 20 pairs). A
fresh gateway computes the embedding rows of each sentence piece it has not seen yet, and the kit's unique tags put
a new number piece ("137") in almost every one of its first 300 prompts and in almost none after (~0.3-0.5 ms more
CPU and latency per ``auto`` miss while they last). ``--warm-pairs 300`` measures the process as it serves once
those are kept.

The kit's tools venv (``shared/perf/setup.sh tools``, under ``$PERFKIT``) runs the fake upstream and
the load generator; the gateway runs on this interpreter. Everything listens on loopback, on free
ports; the script stops every process it started.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import secrets
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.benchmarks.profile_summary import summarise

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_KIT = ROOT.parent / "shared" / "perf"
MODELS = ("gateway-direct", "gateway-auto")
BODY = {
    "model": "fake-gpt",
    "messages": [{"role": "user", "content": "What is the capital of France? Answer in one word."}],
    "max_tokens": 32,
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_http(url: str, seconds: float, process: subprocess.Popen[bytes] | None = None) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise SystemExit(f"process exited with {process.returncode} before {url} answered")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"{url} did not answer within {seconds:.0f} s")


@dataclass(frozen=True, slots=True)
class Kit:
    """The shared perf kit: its scripts, and the tools venv ``setup.sh tools`` built under ``$PERFKIT``."""

    directory: Path
    perfkit: Path

    @property
    def python(self) -> Path:
        return self.perfkit / "tools-venv" / "bin" / "python"

    def env(self, upstream_port: int) -> dict[str, str]:
        return {**os.environ, "PERFKIT": str(self.perfkit), "UPSTREAM_PORT": str(upstream_port)}

    @contextmanager
    def upstream(self, port: int) -> Iterator[str]:
        script = str(self.directory / "run_fake.sh")
        subprocess.run([script, "start"], check=True, env=self.env(port), stdout=subprocess.DEVNULL)
        try:
            yield f"http://127.0.0.1:{port}/v1"
        finally:
            subprocess.run([script, "stop"], check=False, env=self.env(port), stdout=subprocess.DEVNULL)

    def load(self, args: list[str], out: Path) -> dict[str, Any]:
        """One ``load.py`` invocation; its last JSON line (the median line when repeated)."""
        command = [str(self.python), str(self.directory / "load.py"), *args, "-o", str(out)]
        result = subprocess.run(command, check=True, capture_output=True, text=True)
        rows = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
        if not rows:
            raise SystemExit(f"load.py printed no result: {result.stderr[-500:]}")
        last: dict[str, Any] = rows[-1]
        return last


@contextmanager
def gateway(
    root: Path,
    upstream: str,
    redis_url: str,
    key: str,
    workdir: Path,
    log: Path,
    extra_env: dict[str, str] | None = None,
) -> Iterator[tuple[int, str]]:
    """One gateway process on a free port; yields (pid, base URL). ``extra_env``: settings over the defaults."""
    port = free_port()
    entry = {"name": "bench", "key_sha256": hashlib.sha256(key.encode()).hexdigest(), "tenant": "default"}
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "GATEWAY_", "OPENAI_", "PINECONE_"))}
    env.update(
        {
            "PYTHONPATH": str(root),
            "GATEWAY_HOST": "127.0.0.1",
            "GATEWAY_PORT": str(port),
            "GATEWAY_LLM_BASE_URL": upstream,
            "GATEWAY_LLM_API_KEY": "fake-key",
            "GATEWAY_LLM_MODEL": "fake-gpt",
            "REDIS_URL": redis_url,
            "GATEWAY_CACHE_PREFIX": f"bench-{secrets.token_hex(4)}",
            "GATEWAY_RATE_LIMIT_PREFIX": f"bench-rl-{secrets.token_hex(4)}",
            "GATEWAY_API_KEYS": json.dumps([entry]),
            "GATEWAY_VECTOR_STORE_PATH": str(workdir / "lancedb"),
            "GATEWAY_CURATION_DATABASE_URL": f"sqlite+aiosqlite:///{workdir / 'curation.db'}",
            "GATEWAY_LOAD_SAMPLE_KB": "true",
            "GATEWAY_LOG_LEVEL": "WARNING",
            **(extra_env or {}),
        }
    )
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "gateway"], cwd=root, env=env, stdout=sink, stderr=subprocess.STDOUT
        )
        try:
            wait_http(f"http://127.0.0.1:{port}/readyz", 300, process)
            yield process.pid, f"http://127.0.0.1:{port}"
        finally:
            process.terminate()
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def probe_route(base: str, key: str, model: str) -> str:
    """The route one unique request of ``model`` answers on (what ``gateway-auto`` picks for the prompt)."""
    body = json.loads(json.dumps(BODY))
    body["model"] = model
    body["messages"][0]["content"] += f" [probe-{secrets.token_hex(4)}]"
    request = urllib.request.Request(
        f"{base}/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return str(json.load(response)["gateway"]["route"])


def overhead_args(base: str, upstream: str, key: str, model: str, n: int) -> list[str]:
    """``load.py overhead``: ``n`` sequential pairs of unique prompts, the gateway at ``base`` then the upstream."""
    return [
        "overhead",
        "--gateway",
        f"{base}/v1/chat/completions",
        "--direct",
        f"{upstream}/chat/completions",
        "-H",
        f"Authorization: Bearer {key}",
        "--model",
        model,
        "--unique",
        "-n",
        str(n),
    ]


def run_args(base: str, key: str, model: str, concurrency: int, seconds: float, *, unique: bool) -> list[str]:
    """``load.py run``: ``concurrency`` clients for ``seconds``, unique prompts (misses) or one prompt (hits)."""
    unique_flag = ["--unique"] if unique else []
    return [
        "run",
        "--url",
        f"{base}/v1/chat/completions",
        "-H",
        f"Authorization: Bearer {key}",
        "--model",
        model,
        *unique_flag,
        "-c",
        str(concurrency),
        "-d",
        str(seconds),
    ]


def measure(kit: Kit, args: argparse.Namespace, pid: int, base: str, upstream: str, key: str) -> dict[str, Any]:
    common = ["--repeat", str(args.repeat), "--pid", str(pid)]
    out = args.out / "gateway.jsonl"
    results: dict[str, Any] = {}
    for model in args.models:
        results[f"{model} route"] = probe_route(base, key, model)
        if args.warm_pairs:  # sent and not counted: see ``--warm-pairs``
            kit.load([*overhead_args(base, upstream, key, model, args.warm_pairs), "--label", f"{model} warm"], out)
        results[f"{model} overhead"] = kit.load(
            [*overhead_args(base, upstream, key, model, args.seq_n), *common, "--label", f"{model} overhead"], out
        )
        load = run_args(base, key, model, args.concurrency, args.duration, unique=True)
        results[f"{model} miss"] = kit.load([*load, *common, "--label", f"{model} miss"], out)
    for model in args.hit_models:
        load = run_args(base, key, model, args.concurrency, args.duration, unique=False)
        results[f"{model} hit"] = kit.load([*load, *common, "--label", f"{model} hit"], out)
    return results


def profile(kit: Kit, args: argparse.Namespace, pid: int, base: str, key: str) -> None:
    py_spy = args.py_spy or shutil.which("py-spy")
    if py_spy is None:
        raise SystemExit("--profile needs py-spy (pip install py-spy; --py-spy PATH)")
    for model in args.models:
        raw = args.out / f"profile-{model}.txt"
        spy = subprocess.Popen(
            [
                py_spy,
                "record",
                "--pid",
                str(pid),
                "--duration",
                str(round(args.profile)),
                "--rate",
                "200",
                "--format",
                "raw",
                "--full-filenames",
                "--output",
                str(raw),
                "--nonblocking",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(1.0)  # py-spy attaches before the load starts
        load = run_args(base, key, model, args.profile_concurrency, round(args.profile), unique=True)
        kit.load([*load, "--warmup", "0", "--label", f"{model} profile"], args.out / "profile-load.jsonl")
        spy.wait(60)
        print(f"\n### {model}: unique prompts, concurrency {args.profile_concurrency}, {args.profile:.0f} s\n")
        print(summarise(raw.read_text(encoding="utf-8").splitlines()).table())


def litellm_rows(path: Path) -> dict[str, dict[str, Any]]:
    """``bench_litellm.sh`` output: the median line of its overhead, miss and hit measurements."""
    found: dict[str, dict[str, Any]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("{"):
            continue
        row = json.loads(line)
        label = str(row.get("label", ""))
        kind = next((k for k in ("overhead", "miss", "hit") if label.endswith(k)), None)
        if kind is None or (kind == "miss" and "redis" in label) or (kind == "overhead" and "redis-hit" in label):
            continue
        if "summary" in row or kind not in found:
            found[kind] = row
    return found


def _ms(value: Any) -> str:
    return "–" if value is None else f"{float(value):.1f}"


def table(results: dict[str, Any], models: list[str], hit_models: list[str], litellm: dict[str, Any] | None) -> str:
    lite = litellm or {}
    head = "| measure | " + " | ".join(models) + (" | LiteLLM | ratio (gateway / LiteLLM) |" if lite else " |")
    lines = [head, "|---" * (len(models) + 1 + (2 if lite else 0)) + "|"]

    def row(name: str, cells: list[str], lite_cell: str = "", ratios: str = "") -> None:
        lines.append(f"| {name} | " + " | ".join(cells) + (f" | {lite_cell} | {ratios} |" if lite else " |"))

    def ratio(values: list[float | None], base: float | None) -> str:
        if not base:
            return "–"
        return " / ".join("–" if v is None else f"{v / base:.2f}×" for v in values)

    over = [results[f"{m} overhead"] for m in models]
    lo = lite.get("overhead", {})
    row(
        "added latency, sequential miss, p50 / p99 (ms)",
        [f"+{_ms(o.get('added_p50_ms'))} / +{_ms(o.get('added_p99_ms'))}" for o in over],
        f"+{_ms(lo.get('added_p50_ms'))} / +{_ms(lo.get('added_p99_ms'))}" if lo else "",
        "p50 " + ratio([o.get("added_p50_ms") for o in over], lo.get("added_p50_ms")),
    )
    row(
        "server CPU ms per miss, sequential",
        [_ms(o.get("server_cpu_ms_per_req")) for o in over],
        _ms(lo.get("server_cpu_ms_per_req")) if lo else "",
        ratio([o.get("server_cpu_ms_per_req") for o in over], lo.get("server_cpu_ms_per_req")),
    )
    miss = [results[f"{m} miss"] for m in models]
    lm = lite.get("miss", {})
    row(
        "server CPU ms per miss, c=32",
        [_ms(r.get("server_cpu_ms_per_req")) for r in miss],
        _ms(lm.get("server_cpu_ms_per_req")) if lm else "",
        ratio([r.get("server_cpu_ms_per_req") for r in miss], lm.get("server_cpu_ms_per_req")),
    )
    row(
        "c=32, unique prompts (misses): req/s",
        [f"{r.get('rps')} ({r.get('errors_total', r.get('errors', 0))} errors)" for r in miss],
        f"{lm.get('rps')}" if lm else "",
        ratio([r.get("rps") for r in miss], lm.get("rps")),
    )
    hits = [results.get(f"{m} hit") for m in models]
    lh = lite.get("hit", {})
    row(
        "c=32, cache hits: req/s, CPU ms per request",
        [f"{h.get('rps')}, {_ms(h.get('server_cpu_ms_per_req'))}" if h else "–" for h in hits],
        f"{lh.get('rps')}, {_ms(lh.get('server_cpu_ms_per_req'))}" if lh else "",
        ratio([h.get("rps") if h else None for h in hits], lh.get("rps")),
    )
    routes = ", ".join(f"{m} → {results[f'{m} route']}" for m in models)
    return "\n".join(lines) + f"\n\nroutes taken by the unique prompt: {routes}; hits measured for {hit_models}"


def add_kit_arguments(parser: argparse.ArgumentParser) -> None:
    """What every benchmark on the shared perf kit takes: the kit, its venvs, the test Redis, the models and
    how many sequential misses a measurement of added latency sends."""
    parser.add_argument("--kit", type=Path, default=DEFAULT_KIT, help="the shared perf kit directory")
    parser.add_argument(
        "--perfkit",
        type=Path,
        default=Path(os.environ.get("PERFKIT") or Path(tempfile.gettempdir()) / "perfkit"),
        help="the kit's $PERFKIT (tools venv)",
    )
    parser.add_argument("--redis-url", default=os.environ.get("REDIS_TEST_URL", "redis://127.0.0.1:6379/13"))
    parser.add_argument("--models", nargs="+", default=list(MODELS))
    parser.add_argument("--seq-n", type=int, default=300, help="sequential unique misses per measurement")


def open_kit(args: argparse.Namespace) -> Kit:
    """The kit ``add_kit_arguments`` named, refusing to go on without its tools venv."""
    kit = Kit(args.kit.resolve(), args.perfkit)
    if not kit.python.exists():
        raise SystemExit(
            f"no tools venv at {kit.python}: run {kit.directory / 'setup.sh'} tools (PERFKIT={kit.perfkit})"
        )
    return kit


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_kit_arguments(parser)
    parser.add_argument("--root", type=Path, default=ROOT, help="the gateway checkout to run (default: this one)")
    parser.add_argument("--hit-models", nargs="*", default=["gateway-auto"])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--duration", type=float, default=20.0)
    parser.add_argument("--litellm", type=Path, help="bench_litellm.sh's JSON lines, same sitting")
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "miss_cost")
    parser.add_argument("--profile", type=float, default=0.0, help="seconds of py-spy per model instead of the table")
    parser.add_argument(
        "--profile-concurrency", type=int, default=8, help="1: where a sequential miss's CPU goes (every wait idles)"
    )
    parser.add_argument("--py-spy", help="py-spy executable (default: on PATH)")
    parser.add_argument(
        "--warm-pairs",
        type=int,
        default=0,
        help="unique sequential pairs sent to each model first and not counted (default 0: a fresh process)",
    )
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    kit = open_kit(args)
    key = "bench-" + secrets.token_urlsafe(24)
    with (
        tempfile.TemporaryDirectory(prefix="miss-cost-") as work,
        kit.upstream(free_port()) as upstream,
        gateway(args.root.resolve(), upstream, args.redis_url, key, Path(work), args.out / "gateway.log") as served,
    ):
        pid, base = served
        if args.profile:
            profile(kit, args, pid, base, key)
            return
        started = time.monotonic()
        results = measure(kit, args, pid, base, upstream, key)
        elapsed = time.monotonic() - started
    (args.out / "results.json").write_text(json.dumps(results, indent=1), encoding="utf-8")
    litellm = litellm_rows(args.litellm) if args.litellm else None
    print(table(results, args.models, args.hit_models, litellm))
    medians = [r for k, r in results.items() if k.endswith("miss")]
    cpu = statistics.fmean(float(r["server_cpu_ms_per_req"]) for r in medians) if medians else float("nan")
    print(f"\n{args.root.resolve()}: {elapsed:.0f} s of measurement, repeat {args.repeat}; mean CPU/miss {cpu:.2f} ms")


if __name__ == "__main__":
    main()
