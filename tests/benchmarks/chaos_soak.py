"""A chaos soak: the gateway as a real process under mixed traffic while Redis and the LLM fail.

    python -m tests.benchmarks.chaos_soak [--seconds 600] [--workers 4] [--fault-seconds 30]

Starts, on loopback only: a Redis of its own (``redis-server`` on a free port, no persistence), a
fake OpenAI-compatible upstream answering in 200-800 ms (structured calls get schema-shaped JSON),
and ``python -m gateway`` pointed at both. Then ``--workers`` clients send mixed traffic until
``--seconds`` pass or ``--max-requests`` are sent: repeated and fresh questions on every route of
``/v1/query`` and on ``/v1/chat/completions``, document upserts and deletes. Meanwhile, on a
schedule scaled to the run: Redis is restarted twice (empty, as a cache restarts), the upstream
refuses connections for ``--fault-seconds``, and answers 429 (Retry-After: 1) for as long again.

The report: requests, errors by cause inside and outside the fault windows (a window's tail of
``--recovery-seconds`` after it ends counts as inside), p50/p99, requests past the client budget,
the gateway's RSS and open file descriptors at start and end, Redis connections, and the final
check: every acknowledged upsert is retrievable through the API and every acknowledged delete is
gone (each document belongs to one worker, so its last acknowledged operation is its truth; an
operation that was not acknowledged leaves the document unchecked until the next one is).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
from redis import Redis

from tests.ports import free_port
from tests.scripted import structured_reply

REPO = Path(__file__).resolve().parents[2]
TENANT = "soak"
ROUTES = ("auto", "direct", "single_hop", "multi_hop")
REPEATED = (
    "How much does the amber widget weigh?",
    "Which team owns the cobalt widget?",
    "Hello, who are you?",
    "Compare the amber widget and the cobalt widget: which is heavier and who owns each?",
    "What colour is the heaviest widget?",
)
COLOURS = ("amber", "cobalt", "crimson", "jade", "ochre", "slate", "teal", "umber")


class Upstream:
    """An OpenAI-compatible chat endpoint with a ``mode``: "ok" (200-800 ms), "429", or "off" (refused)."""

    def __init__(self) -> None:
        self.port = free_port()
        self.mode = "ok"
        self.calls: Counter[str] = Counter()
        self._server: ThreadingHTTPServer | None = None
        self._lock = threading.Lock()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> None:
        server = ThreadingHTTPServer(("127.0.0.1", self.port), _handler(self))
        server.daemon_threads = True
        self._server = server
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def set_mode(self, mode: str) -> None:
        with self._lock:
            if mode == "off":
                self.stop()
            elif self._server is None:
                self.start()
            self.mode = mode


def _handler(upstream: Upstream) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            return None

        def do_GET(self) -> None:
            self._json(200, {"object": "list", "data": [{"id": "soak", "object": "model", "owned_by": "soak"}]})

        def do_POST(self) -> None:
            request = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
            upstream.calls[upstream.mode] += 1
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                if upstream.mode == "429":
                    self._json(429, {"error": {"message": "rate limited", "type": "rate_limit"}}, {"Retry-After": "1"})
                    return
                time.sleep(random.uniform(0.2, 0.8))
                text = structured_reply(request) or "The widget answer, from the context [1]."
                body = {
                    "id": "chatcmpl-soak",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": str(request.get("model", "soak")),
                    "choices": [
                        {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
                    ],
                    "usage": {"prompt_tokens": 50, "completion_tokens": 10, "total_tokens": 60},
                }
                self._json(200, body)

        def _json(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Connection", "close")
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
            self.close_connection = True

    return Handler


class RedisServer:
    """``redis-server`` on a loopback port without persistence: a restart comes back empty, like a cache."""

    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self._workdir = workdir
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        args = ["--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        command = [shutil.which("redis-server") or "redis-server", *args, "--dir", str(self._workdir)]
        self._process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with contextlib.suppress(Exception):
                if self.client().ping():
                    return
            time.sleep(0.05)
        raise RuntimeError("redis-server did not start")

    def stop(self) -> None:
        if self._process is not None:
            self._process.terminate()
            self._process.wait(timeout=10)
            self._process = None

    def client(self) -> Redis:
        return Redis(host="127.0.0.1", port=self.port, socket_timeout=2)

    def gateway_connections(self) -> int:
        """Connections named by the gateway's client (``rag-gateway``), not this script's own."""
        with contextlib.suppress(Exception):
            return sum(1 for c in self.client().client_list() if c.get("name") == "rag-gateway")
        return -1


@dataclass
class Sample:
    kind: str
    started: float
    seconds: float
    outcome: str  # "ok", an HTTP status with its problem title, or an exception name


@dataclass
class Windows:
    spans: list[tuple[str, float, float]] = field(default_factory=list)

    def phase(self, at: float, tail: float, seconds: float = 0.0) -> str:
        """ "inside <window>", "recovery after <window>" (up to ``tail`` s after it ended) or "outside".

        A request that was still in flight when a window opened (``at`` + ``seconds`` past its start) met
        the fault too: it counts as inside, not as an error outside the windows."""
        for name, start, end in self.spans:
            if at <= end and at + seconds >= start:
                return f"inside {name}"
        for name, _, end in reversed(self.spans):  # the latest window that ended: the one still echoing
            if end < at <= end + tail:
                return f"recovery after {name}"
        return "outside"


@dataclass
class DocState:
    text: str | None = None  # the last acknowledged text; None: acknowledged deleted
    known: bool = False  # False: never acknowledged, or the last operation was not


def gateway_process_stats(pid: int) -> tuple[float, int]:
    """(RSS in MiB, open file descriptors) of a Linux process."""
    rss_kb = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss_kb = int(line.split()[1])
    return rss_kb / 1024, len(os.listdir(f"/proc/{pid}/fd"))


def doc_text(worker: int, slot: int, version: int) -> str:
    colour = COLOURS[(worker + slot) % len(COLOURS)]
    return (
        f"Soak record w{worker}s{slot}v{version}: the {colour} widget number {worker}-{slot} weighs "
        f"{10 + version % 90} kg and is owned by team {chr(65 + version % 26)}{worker}{slot}."
    )


def outcome_of(response: httpx.Response) -> str:
    if response.status_code < 400:
        return "ok"
    title = ""
    with contextlib.suppress(ValueError, AttributeError):
        body = response.json()
        error = body.get("error")  # the chat API answers OpenAI's error object, the native API problem details
        title = f"chat: {error.get('message', '')}"[:60] if isinstance(error, dict) else str(body.get("title", ""))
    return f"{response.status_code} {title}".strip()


def query_body(index: int, rng: random.Random) -> tuple[str, str, dict[str, Any]]:
    """(kind, path, body) of a question: half repeated (cache hits), half fresh, on a random route or chat model."""
    fresh = rng.random() < 0.5
    question = (
        f"How much does the {rng.choice(COLOURS)} widget number {index}-{rng.randrange(10_000)} weigh?"
        if fresh
        else rng.choice(REPEATED)
    )
    if rng.random() < 0.15:
        model = rng.choice(("gateway-auto", "gateway-direct"))
        return "chat", "/v1/chat/completions", {"model": model, "messages": [{"role": "user", "content": question}]}
    route = rng.choice(ROUTES)
    return f"query:{route}", "/v1/query", {"tenant": TENANT, "query": question, "route": route}


async def worker(
    index: int,
    client: httpx.AsyncClient,
    stop: float,
    budget: dict[str, int],
    samples: list[Sample],
    docs: dict[str, DocState],
    rng: random.Random,
    budget_s: float,
) -> None:
    """One client; it alone writes its documents (``w{index}-doc{slot}``), so their order is known."""
    version = 0
    while time.monotonic() < stop and budget["left"] > 0:
        budget["left"] -= 1
        roll = rng.random()
        doc_id = f"w{index}-doc{rng.randrange(6)}"
        text: str | None = None
        if roll < 0.10:
            version += 1
            kind, text = "upsert", doc_text(index, int(doc_id[-1]), version)
            body = {"tenant": TENANT, "documents": [{"id": doc_id, "title": f"Widget {doc_id}", "text": text}]}
            request = client.build_request("POST", "/v1/documents", json=body, timeout=budget_s)
        elif roll < 0.15:
            kind = "delete"
            request = client.build_request(
                "DELETE", f"/v1/documents/{doc_id}", params={"tenant": TENANT}, timeout=budget_s
            )
        else:
            kind, path, body = query_body(index, rng)
            request = client.build_request("POST", path, json=body, timeout=budget_s)
        started = time.monotonic()
        try:
            response = await client.send(request)
            outcome = "ok" if kind == "delete" and response.status_code == 404 else outcome_of(response)
            acknowledged = outcome == "ok"
        except httpx.TimeoutException:
            outcome, acknowledged = "client timeout (past the budget)", False
        except httpx.HTTPError as exc:
            outcome, acknowledged = type(exc).__name__, False
        samples.append(Sample(kind, started, time.monotonic() - started, outcome))
        if kind in ("upsert", "delete"):
            # Not acknowledged: it may or may not have landed, so the document is unknown until its next ack.
            docs[doc_id] = DocState(text, acknowledged)


async def chaos(
    redis: RedisServer, upstream: Upstream, windows: Windows, t0: float, seconds: float, fault_s: float
) -> None:
    """The schedule, as fractions of the run: Redis restarts at 15% and 55%, upstream off at 25%, 429 at 70%."""

    async def at(fraction: float) -> None:
        await asyncio.sleep(max(0.0, t0 + seconds * fraction - time.monotonic()))

    async def restart_redis(name: str) -> None:
        start = time.monotonic()
        await asyncio.to_thread(redis.stop)
        await asyncio.sleep(2.0)  # down for two seconds
        await asyncio.to_thread(redis.start)
        windows.spans.append((name, start, time.monotonic()))

    async def upstream_mode(name: str, mode: str) -> None:
        start = time.monotonic()
        upstream.set_mode(mode)
        await asyncio.sleep(fault_s)
        upstream.set_mode("ok")
        windows.spans.append((name, start, time.monotonic()))

    await at(0.15)
    await restart_redis("redis restart #1")
    await at(0.25)
    await upstream_mode(f"upstream off {fault_s:.0f}s", "off")
    await at(0.55)
    await restart_redis("redis restart #2")
    await at(0.70)
    await upstream_mode(f"upstream 429 {fault_s:.0f}s", "429")


async def verify(client: httpx.AsyncClient, docs: dict[str, DocState]) -> tuple[int, int, list[str]]:
    """Every acknowledged upsert retrievable by its own text, every acknowledged delete absent."""
    present = absent = 0
    failures: list[str] = []
    for doc_id, state in sorted(docs.items()):
        if not state.known:
            continue
        probe = state.text or "Soak record " + doc_id
        body = {"tenant": TENANT, "query": probe, "route": "single_hop", "top_k": 8}
        response = await client.post("/v1/query", json=body, timeout=60)
        found = {s["id"] for s in response.json().get("evidence", []) + response.json().get("sources", [])}
        if state.text is not None:
            present += 1
            if doc_id not in found:
                failures.append(f"acknowledged upsert {doc_id} not retrievable")
        else:
            absent += 1
            if doc_id in found:
                failures.append(f"acknowledged delete {doc_id} still retrievable")
    return present, absent, failures


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def quantiles(seconds: list[float]) -> str:
    return f"p50 {percentile(seconds, 50) * 1000:6.0f} ms, p99 {percentile(seconds, 99) * 1000:6.0f} ms"


def causes_line(group: list[Sample]) -> str:
    causes = Counter(s.outcome for s in group if s.outcome != "ok")
    return ", ".join(f"{n} x {cause}" for cause, n in causes.most_common()) or "no errors"


def report(
    samples: list[Sample],
    windows: Windows,
    tail: float,
    t0: float,
    budget_s: float,
    resources: dict[str, Any],
    verified: tuple[int, int, list[str]],
) -> None:
    print(f"\n=== chaos soak: {len(samples)} requests in {resources['elapsed']:.0f} s ===")
    print(
        f"fault windows (s from start); 'recovery' is the {tail:.0f} s after each (the LLM breaker's cool-down + 5 s):"
    )
    for name, start, end in windows.spans:
        print(f"  {name:<22} {start - t0:6.1f} .. {end - t0:6.1f}")
    phases = [(s_, windows.phase(s_.started, tail, s_.seconds)) for s_ in samples]
    buckets = {
        "outside fault windows": [s_ for s_, phase in phases if phase == "outside"],
        "inside fault windows": [s_ for s_, phase in phases if phase.startswith("inside")],
        "recovery after a window": [s_ for s_, phase in phases if phase.startswith("recovery")],
    }
    for title, group in buckets.items():
        errors = sum(s_.outcome != "ok" for s_ in group)
        fives = sum(s_.outcome.startswith("5") for s_ in group)
        print(f"\n{title}: {len(group)} requests, {errors} errors, {fives} 5xx")
        print(f"  {causes_line(group)}")
    print("\nper window:")
    for name, _, _ in windows.spans:
        for phase in (f"inside {name}", f"recovery after {name}"):
            group = [s_ for s_ in samples if windows.phase(s_.started, tail, s_.seconds) == phase]
            print(f"  {phase:<38} {len(group):5d} requests: {causes_line(group)}")
    print("\ntimeline (10 s buckets): requests, errors, 5xx, p50 of successes, phase at the bucket's middle")
    for bucket in range(int(resources["elapsed"] // 10) + 1):
        group = [s_ for s_ in samples if bucket * 10 <= s_.started - t0 < bucket * 10 + 10]
        ok = [s_.seconds for s_ in group if s_.outcome == "ok"]
        fives = sum(s_.outcome.startswith("5") for s_ in group)
        errors = sum(s_.outcome != "ok" for s_ in group)
        p50 = f"{percentile(ok, 50) * 1000:6.0f} ms" if ok else "     - ms"
        phase = windows.phase(t0 + bucket * 10 + 5, tail)
        print(f"  {bucket * 10:4d}s {len(group):5d} {errors:5d} {fives:5d} {p50}  {phase}")
    ok = [s_.seconds for s_ in samples if s_.outcome == "ok"]
    print(f"\nlatency of successful requests: {quantiles(ok)}")
    for kind in sorted({s_.kind for s_ in samples}):
        times = [s_.seconds for s_ in samples if s_.kind == kind and s_.outcome == "ok"]
        print(f"  {kind:<18} {sum(s_.kind == kind for s_ in samples):6d} sent, {quantiles(times)}")
    slowest = max((s_.seconds for s_ in samples), default=0.0)
    hung = sum(s_.outcome.startswith("client timeout") for s_ in samples)
    print(f"past the {budget_s:.0f} s client budget: {hung} (slowest request {slowest:.1f} s)")
    rss = resources["rss_series"]
    print(
        f"\ngateway RSS: {resources['rss'][0]:.0f} MiB at start, {resources['rss'][1]:.0f} MiB at end "
        f"(every 5 s: min {min(rss):.0f}, max {max(rss):.0f}; last quarter {min(rss[-len(rss) // 4 :]):.0f}.."
        f"{max(rss[-len(rss) // 4 :]):.0f}); open fds: {resources['fds'][0]} -> {resources['fds'][1]}"
    )
    print(
        f"gateway Redis connections (CLIENT LIST, name rag-gateway): {resources['redis'][0]} -> {resources['redis'][1]}"
    )
    print(f"upstream calls by mode: {dict(resources['upstream'])}")
    present, absent, failures = verified
    print(f"\nafter the run: {present} acknowledged upserts checked retrievable, {absent} deletes checked gone")
    for failure in failures:
        print(f"  FAIL {failure}")
    outside_5xx = sum(s_.outcome.startswith("5") for s_ in buckets["outside fault windows"])
    verdict = "PASS" if not failures and not outside_5xx and not hung else "FAIL"
    print(
        f"verdict: {verdict} (5xx outside windows: {outside_5xx}, past budget: {hung}, failed checks: {len(failures)})"
    )


def start_gateway(
    args: argparse.Namespace, workdir: Path, redis: RedisServer, upstream: Upstream
) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "GATEWAY_HOST": "127.0.0.1",
        "GATEWAY_PORT": str(port),
        "REDIS_URL": redis.url,
        "GATEWAY_LLM_BASE_URL": upstream.base_url,
        "GATEWAY_LLM_MODEL": "soak-model",
        "GATEWAY_LLM_TIMEOUT_S": str(args.llm_timeout),
        "GATEWAY_LLM_BREAKER_COOLDOWN_S": str(args.breaker_cooldown),
        "GATEWAY_VECTOR_STORE_PATH": str(workdir / "lancedb"),
        "OTEL_SDK_DISABLED": "true",
    }
    with (workdir / "gateway.log").open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "gateway"], env=env, stdout=log, stderr=subprocess.STDOUT, cwd=REPO
        )
    return process, port


async def drive(
    args: argparse.Namespace, gateway: subprocess.Popen[bytes], port: int, redis: RedisServer, upstream: Upstream
) -> None:
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
        deadline = time.monotonic() + args.startup_timeout
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if (await client.get("/readyz", timeout=5)).status_code == 200:
                    break
            if gateway.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("gateway did not become ready (run with --keep to read its log)")
            await asyncio.sleep(1)
        print(
            f"gateway pid {gateway.pid} :{port}, redis :{redis.port}, upstream :{upstream.port}, {args.seconds:.0f} s"
        )
        rss0, fds0 = gateway_process_stats(gateway.pid)
        resources: dict[str, Any] = {"rss_series": [rss0], "redis": [redis.gateway_connections()]}
        samples: list[Sample] = []
        docs: dict[str, DocState] = {}
        windows = Windows()
        t0 = time.monotonic()
        stop = t0 + args.seconds
        budget = {"left": args.max_requests}

        async def sample_memory() -> None:
            while time.monotonic() < stop:
                await asyncio.sleep(5)
                resources["rss_series"].append(gateway_process_stats(gateway.pid)[0])

        rng = random.Random(args.seed)
        await asyncio.gather(
            chaos(redis, upstream, windows, t0, args.seconds, args.fault_seconds),
            sample_memory(),
            *(
                worker(i, client, stop, budget, samples, docs, random.Random(rng.random()), args.budget)
                for i in range(args.workers)
            ),
        )
        resources["elapsed"] = time.monotonic() - t0
        await asyncio.sleep(5)  # the last requests' cache writes and any pending bump
        verified = await verify(client, docs)
        rss1, fds1 = gateway_process_stats(gateway.pid)
        resources.update(rss=(rss0, rss1), fds=(fds0, fds1), upstream=upstream.calls)
        resources["redis"].append(redis.gateway_connections())
        report(samples, windows, args.breaker_cooldown + 5, t0, args.budget, resources, verified)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=600.0, help="length of the traffic run")
    parser.add_argument("--workers", type=int, default=4, help="concurrent clients")
    parser.add_argument("--max-requests", type=int, default=50_000, help="stop after this many requests")
    parser.add_argument("--fault-seconds", type=float, default=None, help="upstream off/429 (default min(30, T/6))")
    parser.add_argument("--budget", type=float, default=30.0, help="client timeout: a request past it has hung")
    parser.add_argument("--llm-timeout", type=float, default=10.0, help="GATEWAY_LLM_TIMEOUT_S of the gateway")
    parser.add_argument("--breaker-cooldown", type=float, default=10.0, help="GATEWAY_LLM_BREAKER_COOLDOWN_S")
    parser.add_argument("--startup-timeout", type=float, default=600.0)
    parser.add_argument("--seed", type=int, default=16)
    parser.add_argument("--keep", action="store_true", help="keep the work directory (gateway log, LanceDB)")
    args = parser.parse_args()
    if args.fault_seconds is None:
        args.fault_seconds = min(30.0, args.seconds / 6)
    workdir = Path(tempfile.mkdtemp(prefix="chaos-soak-"))
    redis, upstream = RedisServer(workdir), Upstream()
    redis.start()
    upstream.start()
    gateway, port = start_gateway(args, workdir, redis, upstream)
    try:
        asyncio.run(drive(args, gateway, port, redis, upstream))
    finally:
        gateway.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            gateway.wait(timeout=40)
        if gateway.poll() is None:
            gateway.kill()
        upstream.stop()
        redis.stop()
        if args.keep:
            print(f"work directory kept: {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
