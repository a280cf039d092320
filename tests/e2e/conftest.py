"""The real thing: llama-server with the embedded model, and the gateway as its own process."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from routes.offline.local_llm.model import default_model_dir, prepare
from routes.offline.local_llm.server import LocalLLMServer, ServerConfig
from tests.ports import free_port

MODEL = "qwen2.5-coder-1.5b-instruct-q4_k_m"
REPEATABLE_BUDGET_S = 1800


def _serve_model(config: ServerConfig, log: Path) -> Iterator[str]:
    server = LocalLLMServer(config, log_path=log)
    server.start(timeout_s=300)
    try:
        yield server.config.base_url
    finally:
        server.stop()


def _serve_gateway(llm_base_url: str, workdir: Path, **settings: str) -> Iterator[str]:
    port = free_port()
    env = {
        **os.environ,
        "GATEWAY_PORT": str(port),
        "GATEWAY_LLM_BASE_URL": llm_base_url,
        "GATEWAY_VECTOR_STORE_PATH": str(workdir / "lancedb"),
        "GATEWAY_ROUTER_CACHE_DIR": str(workdir / "router"),
        # These tests check what the real model makes of the pipelines, not how fast a shared 2-core machine
        # runs it (speed is for tests/benchmarks): a loaded CI box must not turn the 90 s budget into the answer.
        "GATEWAY_BUDGET_MAX_SECONDS": "600",
        **settings,
    }
    env.pop("REDIS_URL", None)
    log = (workdir / "gateway.log").open("wb")
    process = subprocess.Popen([sys.executable, "-m", "gateway"], env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(url, process, workdir / "gateway.log")
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)


@pytest.fixture(scope="session")
def llm_base_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    config = ServerConfig(model_path=prepare(MODEL, default_model_dir()), port=free_port())
    yield from _serve_model(config, tmp_path_factory.mktemp("llm") / "llama-server.log")


@pytest.fixture(scope="session")
def gateway_url(llm_base_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yield from _serve_gateway(llm_base_url, tmp_path_factory.mktemp("gateway"))


@pytest.fixture(scope="module")
def repeatable_gateway_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A gateway on a model server whose answer to a request never depends on the requests before it.

    For tests that compare two answers token for token. llama.cpp's prompt cache and the batching of two
    slots change the logits in the last bits, which at temperature 0 can flip a near-tie; one slot and no
    prompt cache make a request decode the same whatever ran before. Module-scoped: it is slower, and only
    such a comparison should pay for it.
    """
    config = ServerConfig(
        model_path=prepare(MODEL, default_model_dir()), port=free_port(), parallel=1, prompt_cache=False
    )
    for llm_url in _serve_model(config, tmp_path_factory.mktemp("llm-repeatable") / "llama-server.log"):
        # Every prompt is read from its first token: a Japanese generation prompt alone can take 150 s on a busy
        # 2-core machine, past the default per-call timeout.
        workdir = tmp_path_factory.mktemp("gateway-repeatable")
        yield from _serve_gateway(
            llm_url,
            workdir,
            GATEWAY_LLM_TIMEOUT_S=str(REPEATABLE_BUDGET_S),
            GATEWAY_BUDGET_MAX_SECONDS=str(REPEATABLE_BUDGET_S),
            # The two tenants of a comparison are searched a minute apart; a fold-in landing between them (5 s after
            # their ingest) once changed a cited passage. Off, both are searched in the same index state.
            GATEWAY_VECTOR_STORE_SETTLE_S="0",
        )


def _wait_ready(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"gateway exited early:\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise TimeoutError(f"gateway not ready:\n{log.read_text()[-3000:]}")
