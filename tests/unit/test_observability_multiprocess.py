"""Several worker processes writing to one PROMETHEUS_MULTIPROC_DIR: /metrics reports their sums.

Each worker is a real process (prometheus-client picks its multiprocess value store at import, from
the environment), so the workers here are ``python -c`` subprocesses, as uvicorn/gunicorn workers are.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.unit.observability_support import parse_exposition, value

WORKER = """
import sys
from gateway.observability.metrics import GatewayMetrics
from gateway.observability.recorder import Telemetry
from pipelines.shared.deps import LLMCall

requests, in_flight, close = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "close"
telemetry = Telemetry(GatewayMetrics(), None)
for _ in range(requests):
    with telemetry.request("auto", "q") as scope:
        telemetry.answered(scope, route="single_hop", cached=False, answer="a")
    telemetry.cache_result("exact", "miss")
    with telemetry.route("single_hop"):
        telemetry.llm_usage(LLMCall("generate_answer", "m", 100, 10, 0.5, 0.001))
for _ in range(in_flight):
    telemetry.metrics.in_flight.inc()
if close:
    telemetry.metrics.close()
"""

SCRAPE = """
import sys
from gateway.observability.metrics import GatewayMetrics
sys.stdout.write(GatewayMetrics().exposition().decode())
"""


def run(code: str, directory: Path, *args: str) -> str:
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(directory)}
    result = subprocess.run(
        [sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, check=False, timeout=120
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_two_workers_are_summed(tmp_path: Path) -> None:
    run(WORKER, tmp_path, "3", "2", "close")  # a worker that served 3 requests and then exited cleanly
    run(WORKER, tmp_path, "4", "1", "keep")  # a worker still holding one request in flight
    samples, _ = parse_exposition(run(SCRAPE, tmp_path))  # a third process answers the scrape

    assert value(samples, "gateway_requests_total", route="single_hop", status="200", cached="false") == 7
    assert value(samples, "gateway_request_duration_seconds_count", route="single_hop") == 7
    assert value(samples, "gateway_cache_requests_total", layer="exact", result="miss") == 7
    assert value(samples, "gateway_llm_calls_total", route="single_hop", node="generate_answer", model="m") == 7
    assert value(samples, "gateway_llm_tokens_total", kind="input") == 700
    assert abs(value(samples, "gateway_cost_usd_total", route="single_hop") - 0.007) < 1e-9
    # livesum: the exited worker's in-flight requests no longer count, the live one's do.
    assert value(samples, "gateway_requests_in_flight") == 1
